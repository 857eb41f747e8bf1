"""The report in a real browser (Debian's Chromium through Playwright): a synthetic 2-node job's report
opens with no console errors and no requests beyond the file itself, every section is there and its
charts render with a size; a screenshot is left in the test's tmp_path to look at."""

from __future__ import annotations

import os

import pytest

from tests.profiler.test_report import report

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]
SECTIONS = ["Training job summary", "Rules summary", "System usage", "Framework metrics summary", "Step durations",
            "Data loading"]
CHARTS = 13  # see test_report.test_report_sections_rules_table_and_charts


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
            assert all(box and box["width"] >= 700 and box["height"] >= 40 for box in boxes), boxes
            # Every chart draws something: lines, points, bars.
            for svg in page.locator("svg.chart").all():
                assert svg.locator("polyline, circle, rect[fill]:not([fill='none'])").count() > 0
            rules = page.locator("#rules + table tr")
            assert rules.count() == 12  # a header and the 11 rules ProfilerReport runs
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
