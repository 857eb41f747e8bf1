"""The server at scale on this machine: 1,000 jobs in the store, and a running job followed by 20 clients.

    .venv/bin/python benchmarks/server.py [--jobs 1000] [--followers 20] [--json out.json]

1. The store gets `--jobs` ended jobs (records as a controller leaves them: transitions, an attempt, 100
   metric points each), then `shipyard server` starts over it. Measured: the API's list call (the jobs
   page's request: the newest 50 with cost and status) and the whole list at once (500 a page), median of
   20 calls; the dashboard's jobs page in Debian's Chromium (a fresh page each time: the first load, then
   the median of 5 with the files cached): first contentful paint, and when the table's rows are on
   screen. Goal: under 200 ms.
2. A job runs a fixed CPU step (a 256 x 256 matmul loop, one thread: the other core is left to the
   server and its followers) and prints each step's duration. It runs four times, alternating: nobody
   following (the steps after the first tenth are measured); `--followers` clients following its log through the API's live stream (each a reader of
   /logs/algo-1/stream, as the dashboard's log view); the same number of Chromium pages open on its job
   page (live logs, status, charts), once with the browser held to one core (`taskset`: the job and the
   server keep the other, as if the browsers were on the users' machines) and once free to use both
   (browsers competing with the job for this machine's 2 cores); nobody again. With followers, the steps measured are those that ran
   once every follower was following. Reported: the median step time of each run, its ratio to the
   first, and the server's CPU time during it. Goal: unchanged within noise.
SHIPYARD_HOME is a temporary directory."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]
STEP_SCRIPT = '''\
import argparse, time
import torch
torch.set_num_threads(1)
parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, required=True)
args, _ = parser.parse_known_args()
a = torch.randn(256, 256)
for step in range(args.steps):
    start = time.perf_counter()
    for _ in range(20):
        b = a @ a
    print(f"step {step} at {time.time():.3f} took {(time.perf_counter() - start) * 1000:.3f} ms "
          f"loss={float(b[0, 0]) % 1:.4f}", flush=True)
'''


def fill(store, count: int) -> None:
    """`count` ended jobs, written as a controller writes them."""
    from shipyard.spec.job import JobSpec

    now = time.time()
    for i in range(count):
        spec = JobSpec(job_name=f"bench-{i:04d}-2026-11-25-10-00-00-000", output_path=f"file://{store.home}/out",
                       instance_count=1 + i % 4, hyperparameters={"lr": "0.01", "epochs": "3"},
                       use_spot_instances=i % 3 == 0, max_wait=90000 if i % 3 == 0 else None,
                       spot_without_checkpoints=i % 3 == 0,
                       metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"}])
        store.create_job(spec)
        start = now - (count - i) * 60
        store.transition(spec.job_name, "InProgress", "Training")
        number = store.start_attempt(spec.job_name, start)
        store.update_attempt(spec.job_name, number, end_time=start + 50, outcome="Completed")
        store.update_job(spec.job_name, training_start_time=start, training_end_time=start + 50)
        store.add_metrics(spec.job_name, [("loss", "algo-1", start + s / 2, 1.0 / (s + 1)) for s in range(100)])
        store.transition(spec.job_name, "Completed" if i % 10 else "Failed", "Completed" if i % 10 else "Failed")


def start_server(home: Path) -> tuple[subprocess.Popen, dict]:
    process = subprocess.Popen([sys.executable, "-m", "shipyard.cli.main", "server", "--port", "0"],
                               env={**os.environ, "SHIPYARD_HOME": str(home)}, stdout=subprocess.DEVNULL)
    info = home / "server.json"
    while not info.exists():
        time.sleep(0.05)
    return process, json.loads(info.read_text())


def timed_get(url: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        with urllib.request.urlopen(url) as response:
            response.read()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def first_paint(url: str, repeat: int) -> dict:
    """The first load (nothing cached), then the median of `repeat` more in the same browser (its files
    cached, as for anyone who opened the dashboard before)."""
    from playwright.sync_api import sync_playwright

    paints, rows = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})   # one cache for every load
        for _ in range(repeat + 1):
            page = context.new_page()
            page.goto(url + "/#/jobs")
            page.wait_for_selector("table#jobs tr[data-job]")
            # The page marks when it first put the rows in (app.js); measured in the page, not by this script.
            rows.append(page.evaluate("performance.getEntriesByName('shipyard:jobs-rows')[0].startTime"))
            paints.append(page.evaluate(
                "performance.getEntriesByName('first-contentful-paint').map(e => e.startTime)[0] || null"))
            page.close()
        browser.close()
    return {"first_load": {"first_contentful_paint_ms": paints[0], "rows_on_screen_ms": round(rows[0], 1)},
            "first_contentful_paint_ms": statistics.median(p for p in paints[1:] if p is not None),
            "rows_on_screen_ms": round(statistics.median(rows[1:]), 1)}


def run_job(source: Path, steps: int, followers=None) -> dict:
    """The step job; `followers(name)` starts following it once it is submitted and returns when they
    all follow. Measured: the steps that ran while they followed (without followers, after a tenth)."""
    from shipyard.pytorch import PyTorch
    from shipyard.store import Store

    estimator = PyTorch(entry_point="train.py", source_dir=str(source), hyperparameters={"steps": steps},
                        environment={"OMP_NUM_THREADS": "1"}, hang_timeout_seconds=0)
    estimator.fit(wait=False)
    name = estimator.latest_training_job.name
    store = Store()
    stop = followers(name) if followers else None
    ready = time.time()
    while store.status(name) == "InProgress":
        time.sleep(0.2)
    if stop:
        stop()
    log = store.log_path(name, "algo-1").read_text()
    steps_seen = [(float(at), float(took)) for at, took in re.findall(r"at ([0-9.]+) took ([0-9.]+) ms", log)]
    assert store.status(name) == "Completed" and len(steps_seen) == steps, (store.status(name), len(steps_seen))
    times = [took for at, took in steps_seen[steps // 10:] if not followers or at >= ready]
    return {"job": name, "steps_measured": len(times), "median_step_ms": statistics.median(times),
            "mean_step_ms": round(statistics.fmean(times), 4)}


def stream_followers(url: str, count: int):
    def follow(name: str):
        stop = threading.Event()

        def reader():
            with urllib.request.urlopen(f"{url}/api/jobs/{name}/logs/algo-1/stream", timeout=600) as response:
                for _ in response:
                    if stop.is_set():
                        return

        threads = [threading.Thread(target=reader, daemon=True) for _ in range(count)]
        for thread in threads:
            thread.start()

        def done():
            stop.set()
            for thread in threads:
                thread.join(30)
        return done
    return follow


def browser_followers(url: str, count: int, cpus: str | None = None):
    """`cpus`: the browser runs on these cores only (taskset), as browsers on the users' own machines
    would leave this one's to the job and the server; None: it shares every core with them."""
    def follow(name: str):
        from playwright.sync_api import sync_playwright

        ready, stop = threading.Event(), threading.Event()

        def run():   # Playwright's sync API stays on the thread that started it
            with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
                executable = CHROMIUM
                if cpus is not None:
                    executable = os.path.join(tmp, "chromium")
                    Path(executable).write_text(f'#!/bin/sh\nexec taskset -c {cpus} {CHROMIUM} "$@"\n')
                    os.chmod(executable, 0o755)
                browser = p.chromium.launch(executable_path=executable, args=ARGS)
                pages = [browser.new_page(viewport={"width": 1280, "height": 900}) for _ in range(count)]
                for page in pages:
                    page.goto(f"{url}/#/jobs/{name}")
                ready.set()
                while not stop.wait(0.5):
                    pass
                browser.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        ready.wait(120)

        def done():
            stop.set()
            thread.join(60)
        return done
    return follow


def cpu_seconds(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--followers", type=int, default=20)
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict = {"command": " ".join(["benchmarks/server.py", *sys.argv[1:]]),
                     "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"}
    with tempfile.TemporaryDirectory(prefix="shipyard-bench-server-") as tmp:
        home = Path(tmp) / "home"
        os.environ["SHIPYARD_HOME"] = str(home)
        from shipyard.store import Store

        started = time.perf_counter()
        fill(Store(home), args.jobs)
        print(f"{args.jobs} jobs written in {time.perf_counter() - started:.1f} s", flush=True)
        process, info = start_server(home)
        url = info["url"]
        try:
            results["list_50_ms"] = timed_get(f"{url}/api/jobs", 20)
            results["list_500_ms"] = timed_get(f"{url}/api/jobs?limit=500", 5)
            results["count"] = json.loads(urllib.request.urlopen(f"{url}/api/jobs?limit=1").read())["total"]
            results.update(first_paint(url, 5))
            print(json.dumps(results, indent=2), flush=True)

            source = Path(tmp) / "src"
            source.mkdir()
            (source / "train.py").write_text(STEP_SCRIPT)
            runs = []
            for label, followers in (
                    ("nobody", None), (f"{args.followers} streams", stream_followers(url, args.followers)),
                    (f"{args.followers} Chromium pages on core 1", browser_followers(url, args.followers, cpus="1")),
                    (f"{args.followers} Chromium pages", browser_followers(url, args.followers)),
                    ("nobody again", None)):
                before = cpu_seconds(process.pid)
                run = run_job(source, args.steps, followers)
                run.update(label=label, server_cpu_s=round(cpu_seconds(process.pid) - before, 2))
                runs.append(run)
                print(json.dumps(run), flush=True)
            base = runs[0]["median_step_ms"]
            for run in runs:
                run["ratio"] = round(run["median_step_ms"] / base, 3)
            results["followers"] = runs
        finally:
            process.terminate()
            process.wait(10)
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
