"""The server's JSON API against a real `shipyard server` on 127.0.0.1 over real jobs: a 2-instance DDP
job with metrics, profiling and a profiler rule, and a failed job whose log holds hostile lines. Reads
need no token on loopback; every change needs it (a header), and is refused without it before anything
happens; paths from a request never reach outside the store."""

from __future__ import annotations

import json
import os
import re
import stat
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from shipyard.errors import UnexpectedStatusError
from shipyard.store import Store
from tests.conftest import Server, clean_home

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).parent / "scripts"
STEPS = 8
HOSTILE = ["<script>document.title='pwned'</script>", "<img src=x onerror=\"document.title='pwned'\">"]


def estimator(**arguments):
    from shipyard.pytorch import PyTorch

    defaults = {"entry_point": "train.py", "source_dir": str(SCRIPTS), "instance_count": 2,
                "distribution": {"torch_distributed": {"enabled": True}},
                "metric_definitions": [{"Name": "loss", "Regex": r"loss=([0-9.]+)"}], "stop_grace_seconds": 2}
    return PyTorch(**{**defaults, **arguments})


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A SHIPYARD_HOME with two ended jobs, and a server over it."""
    from shipyard.profiler import ProfilerConfig, ProfilerRule
    from shipyard.profiler import rule_configs as profiler_rules

    home = tmp_path_factory.mktemp("site") / "home"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SHIPYARD_HOME", str(home))
        trained = estimator(base_job_name="ddp", hyperparameters={"steps": STEPS},
                            profiler_config=ProfilerConfig(system_monitor_interval_millis=200),
                            rules=[ProfilerRule.sagemaker(profiler_rules.MaxInitializationTime())],
                            checkpoint_s3_uri=f"file://{home}/checkpoints")
        trained.fit(logs=False)
        failed = estimator(base_job_name="hostile", instance_count=1, distribution=None,
                           hyperparameters={"steps": 1, "hostile": 1, "exit-code": 3})
        with pytest.raises(UnexpectedStatusError):
            failed.fit(logs=False)
        server = Server(home)
        try:
            yield server, trained.latest_training_job.name, failed.latest_training_job.name
        finally:
            server.stop()
            clean_home(home)


def test_server_json_holds_the_address_and_token_for_the_user_only(site):
    server, _, _ = site
    assert stat.S_IMODE(os.stat(server.info_path).st_mode) == 0o600
    info = json.loads(server.info_path.read_text())
    assert info["url"].startswith("http://127.0.0.1:") and info["url"] == server.url
    assert len(info["token"]) >= 32


def test_jobs_list_filters_and_pages(site):
    server, trained, failed = site
    status, page = server.get("/api/jobs")
    assert status == 200 and page["total"] == 2
    assert [j["name"] for j in page["jobs"]] == [failed, trained]   # newest first
    row = page["jobs"][1]
    assert (row["status"], row["instance_count"], row["strategy"], row["instance_type"]) == \
        ("Completed", 2, "torch_distributed", "2 x local")
    assert row["cost"] == 0.0 and row["duration"] > 0
    assert [j["name"] for j in server.get("/api/jobs?status=failed")[1]["jobs"]] == [failed]
    assert [j["name"] for j in server.get("/api/jobs?name=ddp-")[1]["jobs"]] == [trained]
    second = server.get("/api/jobs?limit=1&offset=1")[1]
    assert (second["total"], [j["name"] for j in second["jobs"]]) == (2, [trained])
    status, error = server.get("/api/jobs?status=Finished")
    assert status == 400 and error["detail"] == "status='Finished': unknown name; did you mean 'Failed'?"
    assert server.get("/api/jobs?limit=0")[0] == 422


def test_one_job_its_attempts_events_metrics_system_rules_report(site):
    server, trained, _ = site
    status, job = server.get(f"/api/jobs/{trained}")
    assert status == 200 and job["hosts"] == ["algo-1", "algo-2"]
    assert job["describe"]["TrainingJobStatus"] == "Completed" == job["job"]["status"]
    assert job["describe"]["CheckpointConfig"]["S3Uri"].endswith("/checkpoints")
    assert [a["outcome"] for a in server.get(f"/api/jobs/{trained}/attempts")[1]] == ["Completed"]
    assert isinstance(server.get(f"/api/jobs/{trained}/events")[1], list)
    metrics = server.get(f"/api/jobs/{trained}/metrics")[1]["metrics"]
    assert set(metrics["loss"]) == {"algo-1", "algo-2"}
    assert all(len(points) == STEPS for points in metrics["loss"].values())
    thinned = server.get(f"/api/jobs/{trained}/metrics?points=3")[1]["metrics"]["loss"]["algo-1"]
    assert thinned == [metrics["loss"]["algo-1"][i] for i in (0, 4, 7)]   # first, middle, last
    system = server.get(f"/api/jobs/{trained}/system")[1]["hosts"]
    assert set(system) == {"algo-1", "algo-2"}
    assert all(0 <= value <= 100 for _, value in system["algo-1"]["cpu"]) and len(system["algo-1"]["cpu"]) >= 2
    rules = server.get(f"/api/jobs/{trained}/rules")[1]
    assert [(r["kind"], r["rule"], r["status"]) for r in rules] == [("profiler", "MaxInitializationTime", "NoIssuesFound")]
    status, report = server.get(f"/api/jobs/{trained}/report")
    assert status == 200 and f"Profiling report: {trained}" in report
    assert "script-src" not in server.last_headers["Content-Security-Policy"]   # nothing in it may run
    status, error = server.get(f"/api/jobs/{trained}-x")
    assert status == 404 and f"did you mean {trained!r}" in error["detail"]


def test_logs_per_host_a_page_a_search_and_the_stream_of_an_ended_job(site):
    server, trained, failed = site
    hosts = server.get(f"/api/jobs/{trained}/logs")[1]
    assert [h["host"] for h in hosts] == ["algo-1", "algo-2"] and all(h["bytes"] > 0 for h in hosts)
    page = server.get(f"/api/jobs/{trained}/logs/algo-2")[1]
    log = Store(server.info_path.parent).log_path(trained, "algo-2").read_text()
    assert page["lines"] == log.splitlines() and page["offset"] == len(log.encode()) == page["size"]
    found = server.get(f"/api/jobs/{trained}/logs/algo-2?search=loss%3D")[1]["lines"]
    assert len(found) == STEPS and all("loss=" in line for line in found)
    assert server.get(f"/api/jobs/{trained}/logs/algo-2?tail=2")[1]["lines"] == log.splitlines()[-2:]
    events = stream(server, f"/api/jobs/{failed}/logs/algo-1/stream")
    lines = [line for kind, data in events if kind == "message" for line in data]
    assert lines == Store(server.info_path.parent).log_path(failed, "algo-1").read_text().splitlines()
    assert all(line in lines for line in HOSTILE)   # as they were written: data, for the page to escape
    assert events[-1] == ("end", "Failed")


def stream(server: Server, path: str, until=None, headers: dict | None = None) -> list[tuple[str, object]]:
    """Server-sent events as (event, data) until `event: end` (or `until(events)` is true)."""
    events: list[tuple[str, object]] = []
    request = urllib.request.Request(server.url + path, headers=headers or {})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers.get_content_type() == "text/event-stream"
        kind, data = "message", None
        for raw in response:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
            elif line == "" and data is not None:
                events.append((kind, data))
                if kind == "end" or (until and until(events)):
                    return events
                kind, data = "message", None
    return events


def test_changes_need_the_token_in_a_header_and_nothing_outside_the_store_is_reachable(site):
    server, trained, failed = site
    status, error = server.post(f"/api/jobs/{trained}/stop")
    assert status == 401 and "Authorization: Bearer" in error["detail"]
    assert server.post(f"/api/jobs/{trained}/stop", token="not-the-token")[0] == 403
    assert server.post(f"/api/jobs/{trained}/stop?token={server.token}")[0] == 401   # never from a query string
    status, error = server.post(f"/api/jobs/{trained}/stop", token=True)
    assert status == 409 and "already ended Completed" in error["detail"]
    assert server.post("/api/pools/nope/release", token=True)[0] == 404
    # Paths: a host must be one of the job's, a static file one of the dashboard's.
    status, error = server.get(f"/api/jobs/{trained}/logs/shipyard.db")
    assert status == 400 and error["detail"].startswith("host='shipyard.db': unknown name")
    for path in (f"/api/jobs/{trained}/logs/..%2F..%2F..%2Fshipyard.db", f"/api/jobs/{trained}/logs/..",
                 "/static/..%2F..%2Fstore%2Fdb.py", "/static/__init__.py", "/static/../app.py",
                 f"/api/jobs/..%2F{trained}", "/api/jobs/../../shipyard.db"):
        assert server.get(path)[0] in (400, 404), path
    # DNS rebinding: a request naming another host is refused.
    status, error = server.get("/api/jobs", headers={"Host": "attacker.example:80"})
    assert status == 400 and "127.0.0.1" in error["detail"]
    status, page = server.get("/")
    assert status == 200 and "script-src 'self'" in server.last_headers["Content-Security-Policy"]
    script = re.search(r'src="(/static/app\.js\?v=\w+)"', page).group(1)   # named by a digest of the files
    assert server.get(script)[0] == 200 and "immutable" in server.last_headers["Cache-Control"]
    assert server.get("/static/app.js?v=old")[0] == 200 and server.last_headers["Cache-Control"] == "no-cache"
    status, docs = server.get("/docs")
    assert status == 200 and "/api/jobs/{name}/logs/{host}/stream" in docs and "cdn" not in docs.lower()
    assert "/api/jobs/{name}/stop" in server.get("/openapi.json")[1]["paths"]


def test_a_running_job_streams_live_is_stopped_with_the_token_and_a_bad_job_file_starts_nothing(site):
    server, _, _ = site
    store = Store(server.info_path.parent)
    before = len(store.list_jobs())
    job_file = {"job_file": "entry_point: train.py\nsource_dir: scripts\ninstance_count: 2\n"
                            "distribution: {torch_distributed: {enabled: true}}\nhyperparameters: {steps: 3000}\n"
                            "stop_grace_seconds: 2\nbase_job_name: live\n",
                "directory": str(SCRIPTS.parent)}
    assert server.post("/api/jobs", job_file)[0] == 401
    status, error = server.post("/api/jobs", {**job_file, "job_file": job_file["job_file"] + "instance_cont: 3\n"},
                                token=True)
    assert status == 400 and "instance_cont" in error["detail"] and "instance_count" in error["detail"]
    assert len(store.list_jobs()) == before
    status, submitted = server.post("/api/jobs", job_file, token=True)
    assert status == 201 and submitted["name"].startswith("live-")
    name = submitted["name"]
    try:
        seen = {}

        def live(events):   # lines arrive while the job runs
            if any(kind == "message" and any("loss=" in line for line in data) for kind, data in events):
                seen["status"] = store.status(name)
                return True
            return False

        stream(server, f"/api/jobs/{name}/logs/algo-2/stream", until=live)
        assert seen["status"] == "InProgress"
        status, stopped = server.post(f"/api/jobs/{name}/stop", token=True)
        assert status == 200 and stopped["stop_requested"]
        events = stream(server, f"/api/jobs/{name}/logs/algo-2/stream")
        assert events[-1] == ("end", "Stopped")
        assert server.get(f"/api/jobs/{name}")[1]["job"]["status"] == "Stopped"
    finally:
        store.request_stop(name)


def test_tuning_jobs_and_costs(site):
    from shipyard import Estimator
    from shipyard.tuner import HyperparameterTuner, IntegerParameter

    server, _, _ = site
    tuner = HyperparameterTuner(
        Estimator(entry_point="objective.py", source_dir=str(Path(__file__).parents[1] / "tuning" / "scripts"),
                  hyperparameters={"epochs": 2, "epoch-seconds": 0.01}),
        "loss", {"width": IntegerParameter(8, 64)}, metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
        objective_type="Minimize", max_jobs=2, max_parallel_jobs=2, base_tuning_job_name="srv")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SHIPYARD_HOME", str(server.info_path.parent))
        tuner.fit(wait=True)
    name = tuner.latest_tuning_job.name
    listed = {t["name"]: t for t in server.get("/api/tuning")[1]}
    assert (listed[name]["status"], listed[name]["jobs_done"], listed[name]["jobs_total"]) == ("Completed", 2, 2)
    tuning = server.get(f"/api/tuning/{name}")[1]
    assert tuning["describe"]["HyperParameterTuningJobStatus"] == "Completed"
    assert [t["trial"] for t in tuning["trials"]] == [1, 2]
    assert all(isinstance(t["hyperparameters"]["width"], float) and isinstance(t["objective"], float)
               for t in tuning["trials"])
    assert listed[name]["best_value"] == min(t["objective"] for t in tuning["trials"])
    assert server.post(f"/api/tuning/{name}/stop", token=True)[0] == 409
    jobs = server.get("/api/jobs?limit=500")[1]["total"]
    costs = server.get("/api/costs?by=prefix")[1]
    assert costs["rows"][-1]["prefix"] == "total" and costs["rows"][-1]["jobs"] == jobs
    assert {"ddp", "hostile", "srv"} <= {r["prefix"] for r in costs["rows"]}
    assert server.get("/api/costs?by=week")[0] == 422


@pytest.mark.sandbox
def test_a_warm_pool_is_listed_and_released_with_the_token(home, shipyard_server):
    job = estimator(instance_count=1, distribution=None, hyperparameters={"steps": 1}, keep_alive_period_in_seconds=600)
    job.fit(logs=False)
    pools = shipyard_server.get("/api/pools")[1]
    assert [(p["status"], p["job"]) for p in pools] == [("Available", job.latest_training_job.name)]
    assert 0 < pools[0]["expires_in"] <= 600
    assert shipyard_server.post(f"/api/pools/{pools[0]['name']}/release")[0] == 401
    status, released = shipyard_server.post(f"/api/pools/{pools[0]['name']}/release", token=True)
    assert status == 200 and released["status"] == "Terminated"


def test_jobs_keep_running_when_the_server_stops(home, shipyard_server):
    job_file = {"job_file": f"entry_point: train.py\nsource_dir: {SCRIPTS}\nhyperparameters: {{steps: 20}}\n"}
    status, submitted = shipyard_server.post("/api/jobs", job_file, token=True)
    assert status == 201
    shipyard_server.stop()
    assert not shipyard_server.info_path.exists()   # a stopped server leaves no address behind
    store = Store()
    deadline = time.monotonic() + 120
    while store.status(submitted["name"]) == "InProgress" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert store.status(submitted["name"]) == "Completed"


def test_beyond_loopback_every_request_needs_the_token(home):
    """The app a non-loopback bind gets (served here on 127.0.0.1 all the same: tests bind nothing else)."""
    import threading

    import uvicorn

    from shipyard.server.app import create_app
    from shipyard.server.serve import plan, warnings_for

    assert warnings_for(plan("0.0.0.0", 0, None, Store())) and not warnings_for(plan("127.0.0.1", 0, None, Store()))
    app = create_app(Store(), "t" * 32, loopback=False)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    config.load()
    sock = config.bind_socket()
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/api/jobs"
        while not server.started:
            time.sleep(0.02)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=10)
        assert refused.value.code == 401
        request = urllib.request.Request(url, headers={"Authorization": "Bearer " + "t" * 32,
                                                       "Host": "build-box.example:8765"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read())["total"] == 0
    finally:
        server.should_exit = True
        thread.join(10)
