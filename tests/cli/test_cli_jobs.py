"""Real jobs through the real `shipyard` executable: run to completion, detach and wait, stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

_SCRIPT = Path(sys.executable).with_name("shipyard")  # the console script pyproject.toml declares
SHIPYARD = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "shipyard.cli.main"]

STOPPABLE = """\
import os, signal, sys, time
def on_term(signum, frame):
    model = os.environ.get("SM_MODEL_DIR", "/opt/ml/model")
    with open(os.path.join(model, "saved.txt"), "w") as f:
        f.write("saved on SIGTERM")
    print("got SIGTERM", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
time.sleep(120)
"""


@pytest.fixture
def shipyard(home, tmp_path):
    def run(*args: str, check_rc: int | None = 0, timeout: float = 90) -> subprocess.CompletedProcess:
        env = {**os.environ, "SHIPYARD_HOME": str(home)}
        done = subprocess.run([*SHIPYARD, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=timeout)
        if check_rc is not None:
            assert done.returncode == check_rc, f"{args}: rc {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done
    return run


def _describe(shipyard, name: str) -> dict:
    return json.loads(shipyard("describe", name).stdout)


def test_run_to_completion_then_list_describe_logs(shipyard, tmp_path):
    (tmp_path / "train.py").write_text('import sys\nprint("args", sys.argv[1:])\nprint("loss=0.5")\n')
    done = shipyard("run", "train.py", "--job-name", "cli-done", "--metric", "loss=loss=([0-9.]+)",
                    "--hp", "epochs=3", "--hp", "note=a b;$(touch pwned)", "--stop-grace-seconds", "5")
    assert "algo-1 | loss=0.5" in done.stdout and "Completed" in done.stdout
    assert "cli-done" in done.stderr
    assert not (tmp_path / "pwned").exists()

    listed = shipyard("jobs", "list").stdout.splitlines()
    assert listed[1].split()[:3] == ["cli-done", "Completed", "Completed"]

    description = _describe(shipyard, "cli-done")
    assert description["TrainingJobStatus"] == "Completed"
    assert [(m["MetricName"], m["Value"]) for m in description["FinalMetricDataList"]] == [("loss", 0.5)]
    assert json.loads(description["HyperParameters"]["note"]) == "a b;$(touch pwned)"

    logs = shipyard("logs", "cli-done").stdout.splitlines()
    assert logs and all(line.startswith("algo-1 | ") for line in logs)
    assert "algo-1 | loss=0.5" in logs
    assert "algo-1 | args ['--epochs', '3', '--note', 'a b;$(touch pwned)']" in logs


def test_failed_job_exits_1(shipyard, tmp_path):
    (tmp_path / "train.py").write_text('raise SystemExit("boom: bad data")\n')
    done = shipyard("run", "train.py", "--job-name", "cli-fail", "--no-logs", check_rc=1)
    assert "error: job cli-fail ended Failed" in done.stderr and "Traceback (most recent" not in done.stderr
    assert "boom: bad data" in done.stdout + done.stderr


def test_detached_job_keeps_running_and_wait_returns_0(shipyard, tmp_path, home):
    # The job waits for `go`, so it is surely running when the CLI has exited. The instance sees it in a
    # local channel's directory (bound read-only, live); nothing else of the host's /tmp.
    (tmp_path / "signals").mkdir()
    go = tmp_path / "signals" / "go"
    (tmp_path / "train.py").write_text(f'import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.1)\n'
                                       'print("slept", flush=True)\n')
    started = time.monotonic()
    done = shipyard("run", "train.py", "--detach", "--base-job-name", "cli-detach", "--channel",
                    f"signals={tmp_path / 'signals'}")
    assert time.monotonic() - started < 20
    name = done.stdout.strip()
    assert name.startswith("cli-detach-")
    # The CLI has exited; the job's controller carries on without it.
    from shipyard.control.reconcile import controller_alive
    from shipyard.store import Store

    record = Store(home).get_job(name)
    assert record.status == "InProgress" and controller_alive(record)
    go.touch()
    waited = shipyard("wait", name, "--logs")
    assert "algo-1 | slept" in waited.stdout and "Completed" in waited.stdout
    assert _describe(shipyard, name)["TrainingJobStatus"] == "Completed"


def test_stopped_job_keeps_what_it_saved(shipyard, tmp_path, home):
    (tmp_path / "train.py").write_text(STOPPABLE)
    name = shipyard("run", "train.py", "--detach", "--job-name", "cli-stop", "--framework", "none",
                    "--stop-grace-seconds", "5", "--output-path", "out").stdout.strip()
    assert name == "cli-stop"
    log, deadline = home / "jobs" / name / "logs" / "algo-1.log", time.monotonic() + 60
    while not (log.exists() and "ready" in log.read_text()):  # the script's SIGTERM handler is in place
        assert time.monotonic() < deadline, shipyard("describe", name).stdout
        time.sleep(0.2)
    assert "stopping cli-stop" in shipyard("stop", name).stdout
    waited = shipyard("jobs", "wait", name, check_rc=1)
    assert "Stopped" in waited.stdout
    description = _describe(shipyard, name)
    assert (description["TrainingJobStatus"], description["SecondaryStatus"]) == ("Stopped", "Stopped")
    model = description["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://")
    assert model.startswith(str(tmp_path / "out"))  # a relative --output-path is relative to where we ran
    with tarfile.open(model) as tar:
        assert tar.extractfile("saved.txt").read() == b"saved on SIGTERM"
    assert "algo-1 | got SIGTERM" in shipyard("logs", name).stdout
    assert shipyard("stop", name, check_rc=2).stderr.startswith("error: job cli-stop already ended Stopped")
