"""The dashboard in a real browser (Debian's Chromium through Playwright) against a real server and real
jobs: the jobs table follows a running 2-instance job to Completed without a reload while its page streams
its logs and draws its metric as it goes; a job is stopped from its page, first refused without the token,
then with it; hostile log lines and hyperparameters are shown as text and never run; the tuning, compare,
pools and costs pages draw their charts. Every page: no console error, no request beyond the server.
Screenshots are left in each test's tmp_path to look at."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from shipyard.errors import UnexpectedStatusError
from shipyard.store import Store
from tests.conftest import Server, clean_home
from tests.server.test_api import HOSTILE, SCRIPTS, estimator

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"),
                                                   reason="no Chromium at /usr/bin/chromium (scripts/setup.sh installs it)")]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]
HOSTILE_NAME = "<img src=x onerror=\"document.title='pwned'\">"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A SHIPYARD_HOME with a finished 2-instance job with metrics and profiling, a failed job whose log and
    hyperparameters are hostile, a 3-trial tuning job; a server over it; a browser."""
    from playwright.sync_api import sync_playwright

    from shipyard import Estimator
    from shipyard.profiler import ProfilerConfig
    from shipyard.tuner import ContinuousParameter, HyperparameterTuner, IntegerParameter

    home = tmp_path_factory.mktemp("dashboard") / "home"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SHIPYARD_HOME", str(home))
        trained = estimator(base_job_name="ddp", hyperparameters={"steps": 12},
                            profiler_config=ProfilerConfig(system_monitor_interval_millis=200))
        trained.fit(logs=False)
        hostile = estimator(base_job_name="hostile", instance_count=1, distribution=None,
                            hyperparameters={"steps": 1, "hostile": 1, "exit-code": 3, "note": HOSTILE_NAME})
        with pytest.raises(UnexpectedStatusError):
            hostile.fit(logs=False)
        tuner = HyperparameterTuner(
            Estimator(entry_point="objective.py", source_dir=str(Path(__file__).parents[1] / "tuning" / "scripts"),
                      hyperparameters={"epochs": 2, "epoch-seconds": 0.01}),
            "loss", {"lr": ContinuousParameter(1e-4, 1.0, "Logarithmic"), "width": IntegerParameter(8, 64)},
            metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"}], objective_type="Minimize",
            max_jobs=3, max_parallel_jobs=2, base_tuning_job_name="tune")
        tuner.fit(wait=True)
        server = Server(home)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                yield {"server": server, "browser": browser, "trained": trained.latest_training_job.name,
                       "hostile": hostile.latest_training_job.name, "tuning": tuner.latest_tuning_job.name}
            finally:
                browser.close()
                server.stop()
                clean_home(home)


class Watched:
    """A page whose console errors, dialogs and requests are collected, to be checked at the end."""

    def __init__(self, browser, server: Server) -> None:
        self.server = server
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: m.type in ("error", "warning") and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("request", lambda r: self.requests.append(r.url))

    def open(self, route: str, token: bool = False):
        if token:   # as the URL the server prints: the token in the fragment, never sent to the server
            self.page.goto(f"{self.server.url}/#token={self.server.token}")
            self.page.wait_for_selector("table#jobs")
            self.page.evaluate(f"location.hash = {route!r}")
        else:
            self.page.goto(f"{self.server.url}/{route}")
        return self.page

    def check(self, tmp_path: Path, name: str) -> None:
        self.page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
        self.context.close()
        assert self.errors == [] and self.dialogs == []
        outside = [url for url in self.requests if not url.startswith(self.server.url + "/")]
        assert outside == []
        assert all("token" not in url for url in self.requests)   # never in a URL the server sees


def text(page, selector: str) -> str:
    return page.locator(selector).first.inner_text().strip()


def wait_text(page, selector: str, expected: str, timeout: float = 120_000) -> None:
    page.wait_for_function("([s, t]) => { const e = document.querySelector(s); return e && e.textContent.trim() === t; }",
                           arg=[selector, expected], timeout=timeout)


def test_a_running_job_moves_to_completed_without_reload_while_its_page_streams_logs_and_charts(site, tmp_path):
    server = site["server"]
    steps = 40
    status, submitted = server.post("/api/jobs", {
        "job_file": f"entry_point: train.py\nsource_dir: {SCRIPTS}\ninstance_count: 2\n"
                    "distribution: {torch_distributed: {enabled: true}}\n"
                    f"hyperparameters: {{steps: {steps}, sleep: 0.25}}\nbase_job_name: live\n"
                    "metric_definitions: [{Name: loss, Regex: 'loss=([0-9.]+)'}]\n"}, token=True)
    assert status == 201
    name = submitted["name"]
    jobs, job = Watched(site["browser"], server), Watched(site["browser"], server)
    listing = jobs.open("#/jobs")
    row = f'table#jobs tr[data-job="{name}"]'
    wait_text(listing, f"{row} td.status", "InProgress", 30_000)
    listing.evaluate("window.stillTheSamePage = true")
    page = job.open(f"#/jobs/{name}")
    wait_text(page, "#job-status", "InProgress", 30_000)
    # Lines arrive while the job runs: the first loss line is on the page before the job ends.
    page.wait_for_function("() => [...document.querySelectorAll('#log-lines div.line')].some(l => l.textContent.includes('loss='))",
                           timeout=60_000)
    assert text(page, "#job-status") == "InProgress" and Store(server.info_path.parent).status(name) == "InProgress"
    page.wait_for_selector('#metrics svg.chart.metric[data-metric="loss"] path.series', state="attached", timeout=30_000)
    wait_text(listing, f"{row} td.status", "Completed")
    assert listing.evaluate("window.stillTheSamePage") is True   # followed, not reloaded
    wait_text(page, "#job-status", "Completed", 30_000)
    log = Store(server.info_path.parent).log_path(name, "algo-1").read_text().splitlines()
    page.wait_for_function("n => document.querySelectorAll('#log-lines div.line').length === n", arg=len(log))
    assert page.locator("#log-lines div.line").all_inner_texts() == log
    page.wait_for_function("n => [...document.querySelectorAll('#metrics svg.chart.metric[data-metric=\"loss\"] path.series')]"
                           ".every(p => +p.dataset.points === n)", arg=steps)
    assert page.locator('#metrics svg.chart.metric[data-metric="loss"] path.series').count() == 2   # one per host
    assert page.locator('#metrics svg.chart.metric[data-metric="loss"] circle').count() >= 2 * steps
    page.locator('button.host-tab[data-host="algo-2"]').click()
    page.locator("#log-search").fill("step 3")
    page.wait_for_function("() => [...document.querySelectorAll('#log-lines div.line')].filter(l => l.offsetParent)"
                           ".every(l => l.textContent.toLowerCase().includes('step 3'))")
    jobs.check(tmp_path, "jobs")
    job.check(tmp_path, "job")


def test_a_job_is_stopped_from_its_page_only_with_the_token(site, tmp_path):
    server = site["server"]
    status, submitted = server.post("/api/jobs", {
        "job_file": f"entry_point: train.py\nsource_dir: {SCRIPTS}\ninstance_count: 2\n"
                    "distribution: {torch_distributed: {enabled: true}}\nhyperparameters: {steps: 3000}\n"
                    "stop_grace_seconds: 2\nbase_job_name: stoppable\n"}, token=True)
    assert status == 201
    name = submitted["name"]
    store = Store(server.info_path.parent)
    try:
        watched = Watched(site["browser"], server)
        page = watched.open(f"#/jobs/{name}")          # no token in this browser
        page.wait_for_selector("#log-lines div.line", timeout=60_000)
        page.locator("button#stop").click()
        page.locator("button#stop-confirm").click()
        page.wait_for_selector("#token-input")          # refused: the page asks for the token
        assert store.status(name) == "InProgress" and store.stop_requested(name) is None
        page.locator("#token-input").fill(server.token)
        page.locator("button#token-save").click()
        page.locator("button#stop").click()
        page.locator("button#stop-confirm").click()
        wait_text(page, "#job-status", "Stopped", 60_000)
        assert store.status(name) == "Stopped"
        # The 401 of the first try is the only error the console may show (the browser logs refused requests).
        watched.errors = [e for e in watched.errors if "401" not in e]
        watched.check(tmp_path, "stopped")
    finally:
        store.request_stop(name)


def test_hostile_text_from_a_job_is_shown_never_run(site, tmp_path):
    server = site["server"]
    watched = Watched(site["browser"], server)
    page = watched.open(f"#/jobs/{site['hostile']}", token=True)
    wait_text(page, "#job-status", "Failed", 30_000)
    page.wait_for_function("n => [...document.querySelectorAll('#log-lines div.line')].length >= n", arg=len(HOSTILE))
    lines = page.locator("#log-lines div.line").all_inner_texts()
    assert all(line in lines for line in HOSTILE)
    assert json.dumps(HOSTILE_NAME) in page.locator("#hyperparameters").inner_text()   # JSON-encoded, as SageMaker's SDK sends it
    assert page.locator("body script:not([src]), img[src='x'], #log-lines img").count() == 0
    assert page.title() != "pwned"
    watched.check(tmp_path, "hostile")


def test_tuning_compare_pools_and_costs_pages_draw_their_charts(site, tmp_path):
    server = site["server"]
    tuning = server.get(f"/api/tuning/{site['tuning']}")[1]
    watched = Watched(site["browser"], server)
    page = watched.open("#/tuning")
    page.wait_for_selector(f'table#tuning tr[data-tuning="{site["tuning"]}"]')
    page.locator(f'table#tuning tr[data-tuning="{site["tuning"]}"] a').first.click()
    page.wait_for_selector("table#trials tr[data-trial]")
    assert page.locator("table#trials tr[data-trial]").count() == 3
    assert page.locator("#objective-chart circle.trial").count() == 3
    assert page.locator("#objective-chart path.best").count() == 1
    assert sorted(page.locator("#hp-charts svg.chart.hp").evaluate_all("s => s.map(e => e.dataset.hp)")) == ["lr", "width"]
    page.screenshot(path=str(tmp_path / "tuning.png"), full_page=True)

    trials = [t["job"] for t in tuning["trials"]][:2]
    page.evaluate(f"location.hash = '#/compare?jobs={','.join(trials)}'")
    chart = 'svg.chart.compare[data-metric="loss"]'
    page.wait_for_selector(f"{chart} path.series", state="attached")
    assert sorted(page.locator(f"{chart} path.series").evaluate_all("s => s.map(e => e.dataset.job)")) == sorted(trials)
    page.screenshot(path=str(tmp_path / "compare.png"), full_page=True)

    page.evaluate(f"location.hash = '#/jobs/{site['trained']}'")
    page.wait_for_selector('#system svg.chart.system[data-host="algo-2"]')
    assert page.locator("#system svg.chart.system").count() == 2
    assert page.locator("#timeline svg.chart.timeline rect").count() >= 3
    assert page.locator("a#report").get_attribute("href") == f"/api/jobs/{site['trained']}/report"
    page.screenshot(path=str(tmp_path / "job-finished.png"), full_page=True)

    page.evaluate("location.hash = '#/pools'")
    page.wait_for_selector("table#pools")
    page.evaluate("location.hash = '#/costs'")
    page.wait_for_selector("#costs-by-day svg.chart.costs rect.cost", state="attached")
    assert "$" in page.locator("#cost-total").inner_text()
    watched.check(tmp_path, "costs")
