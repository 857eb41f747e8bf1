"""The report in a real browser (Debian's Chromium through Playwright): a synthetic 2-node job's report
opens with no console errors and no requests beyond the file itself, every section is there, its charts
render with a size and nice ticks, the job's own rule shows with its parameter and its limit, and the
shares shown add up to 100; a screenshot is left in the test's tmp_path to look at."""

from __future__ import annotations

import os
import re

import pytest

from tests.profiler.test_report import assert_nice, report

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]
SECTIONS = ["Training job summary", "Rules summary", "System usage", "Framework metrics summary", "Step durations",
            "Data loading"]
CHARTS = 13  # see test_report.test_report_sections_rules_table_and_charts
BARS = ("steps vs others", "step time", "CPU vs GPU operators")  # their y axes name the nodes
# What each chart draws as text: matplotlib draws text as paths, with the text in a comment beside them.
CHART_TEXTS = """() => [...document.querySelectorAll("svg.chart")].map(svg => {
  const texts = {title: svg.getAttribute("aria-label"), x: [], y: [], all: []};
  const walker = document.createTreeWalker(svg, NodeFilter.SHOW_COMMENT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const text = node.textContent.trim(), tick = node.parentElement.closest('g[id*="tick_"]');
    texts.all.push(text);
    if (tick) texts[/xtick_/.test(tick.id) ? "x" : "y"].push(text);
  }
  return texts;
})"""


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM} (scripts/setup.sh installs it)")
def test_report_renders_in_chromium(tmp_path):
    from playwright.sync_api import sync_playwright

    path = tmp_path / "profiler-report.html"
    path.write_text(report(tmp_path / "profiler-output"))
    errors, requests, failed = [], [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.on("console", lambda m: m.type in ("error", "warning") and errors.append(m.text))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.on("requestfailed", lambda r: failed.append(r.url))
            page.goto(path.as_uri(), wait_until="load")
            assert page.title() == "Profiling report two-nodes"
            assert page.locator("h2").all_inner_texts() == SECTIONS
            boxes = [svg.bounding_box() for svg in page.locator("svg.chart").all()]
            assert len(boxes) == CHARTS
            assert all(box and 700 <= box["width"] <= 1100 and box["height"] >= 100 for box in boxes), boxes
            for svg in page.locator("svg.chart").all():  # every chart draws something: lines, points, bars
                assert svg.locator("path, use").count() > 10
            # The rules table fits the page: a header, the 11 rules ProfilerReport runs, the job's own StepOutlier.
            rules = page.locator("table.rules")
            assert rules.locator("tr").count() == 13 and rules.bounding_box()["width"] <= 1100
            own = rules.locator("tr", has_text="job rule StepOutlier")
            assert own.locator("b").all_inner_texts() == ["stddev=5"]  # set on the job; the others are defaults
            assert "n_outliers=10" in own.inner_text()
            # Shares shown add up to 100.
            shares = page.locator("tr", has_text="initialization / training loop / finalization").locator("td").nth(1)
            assert sum(int(s) for s in re.findall(r"(\d+)%", shares.inner_text())) == 100
            charts = page.evaluate(CHART_TEXTS)
            for chart in charts:  # nice ticks, no more decimals than needed
                assert_nice(chart["x"])
                if chart["title"] not in BARS:
                    assert_nice(chart["y"])
            [algo_2] = [c for c in charts if c["title"] == "algo-2 step durations (TRAIN)"]
            assert any(t.startswith("StepOutlier: mean + 5 std = ") for t in algo_2["all"])  # the job's limit
            assert all(not re.search(r"\.\d", label) for label in algo_2["x"])  # step numbers
            # The top CPU and GPU operators of each node, the kernel names wrapped within the page.
            operators = page.locator("table.operators").all()
            assert len(operators) == 4 and all(t.locator("tr").count() >= 2 for t in operators)
            assert all(t.bounding_box()["width"] <= 1100 for t in operators)
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert errors == [] and failed == []
    assert requests == [path.as_uri()]  # nothing but the file itself
    assert (tmp_path / "report.png").stat().st_size > 50_000
