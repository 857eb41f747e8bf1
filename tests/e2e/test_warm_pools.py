"""Issue 16, end to end: warm pools on the local backend. A job with keep_alive_period_in_seconds leaves
its instances warm (sandbox, warm process, framework imported); the next matching job runs on them and
starts clean; pools expire, are released, survive nothing they should not, and leave no process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import psutil
import pytest

from shipyard.pytorch import PyTorch
from shipyard.store import Store
from shipyard.store.pools import PoolStore

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]
SCRIPTS = Path(__file__).parent / "scripts"
TRAIN = "print('trained', flush=True)\n"


def _estimator(source: Path, **kwargs) -> PyTorch:
    options = {"entry_point": "train.py", "source_dir": str(source), "instance_type": "local", "max_run": 120,
               "stop_grace_seconds": 5, "keep_alive_period_in_seconds": 60, "hang_timeout_seconds": 60}
    return PyTorch(**{**options, **kwargs})


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "src"
    path.mkdir()
    (path / "train.py").write_text(TRAIN)
    return path


def _pool(name: str):
    return PoolStore(Store()).get(name)


def _wait_for(condition, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (value := condition()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return value


def _warm_processes(pool: str) -> list[psutil.Process]:
    """Every process of the pool's sandboxes on this machine (their command lines name its directory)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(f"/pools/{pool}/" in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def _sleepers() -> list[str]:
    return [" ".join(p.info["cmdline"]) for p in psutil.process_iter(["cmdline"])
            if (p.info["cmdline"] or [])[:2] in (["sleep", "313"], ["sleep", "314"])]


def test_a_job_on_a_warm_pool_starts_clean(home, source):
    """Job A leaves files, processes, threads, descriptors, environment, modules and signal handlers;
    job B, on the same two warm instances, finds none of it: only the warm pool cache is kept."""
    shutil.copy(SCRIPTS / "warm_probe.py", source / "train.py")
    est = _estimator(source, instance_count=2, distribution={"torch_distributed": {"enabled": True}})
    est.set_hyperparameters(mode="pollute")
    est.fit(logs=False)
    first = est.latest_training_job
    assert first.describe()["WarmPoolStatus"]["Status"] == "Available"
    assert _sleepers() == []   # what job A started was killed when it ended, not left running

    est.set_hyperparameters(mode="inspect")
    est.fit(logs=False)
    second = est.latest_training_job.describe()
    reused = first.describe()["WarmPoolStatus"]
    assert {**reused, "ResourceRetainedBillableTimeInSeconds": 0} == {
        "Status": "Reused", "ReusedByJob": second["TrainingJobName"], "ResourceRetainedBillableTimeInSeconds": 0}
    assert second["WarmPoolStatus"]["Status"] == "Available"
    with tarfile.open(second["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://")) as tar:
        seen = {m.name.removesuffix(".json"): json.loads(tar.extractfile(m).read()) for m in tar.getmembers()
                if m.isfile() and m.name.endswith(".json")}
    assert sorted(seen) == ["algo-1", "algo-2"]
    for host, record in seen.items():
        # Warm: the rank is a fork of the warm process, torch imported before the script's first line.
        assert record["preloaded"] and record["forked"], record
        assert record["modules"] == [] and record["storage_client"] == [] and record["mp_main_is_main"]
        assert record["litter"] == dict.fromkeys(record["litter"], False)
        assert record["cache"] == [host + ".txt"]   # each instance's cache is its own
        assert record["polluted_env"] is None and not record["polluted_path"]
        assert record["sleepers"] == []
        assert record["fds"][:3] == [0, 1, 2]
        assert not [t for t in record["fd_targets"] if t.startswith(("socket:", "pipe:")) or first.name in t], \
            record["fd_targets"]
        assert not any("(sleep)" in name for name in record["threads"]), record["threads"]
        assert record["sigusr1_default"]
        assert record["cwd"] == "/opt/ml/code"
        assert record["argv"] == ["train.py", "--mode", "inspect"]
        assert record["hyperparameters"]["mode"] == "\"inspect\""   # JSON-encoded, as SageMaker writes it
        assert int(record["capabilities"], 16) == 0
    events = [e["message"] for e in Store().events(second["TrainingJobName"])]
    assert any(e.startswith(f"reusing warm pool {first.name}") for e in events)
    # ...which its warm processes hold for their agents: aiohttp's extension is mapped in each
    warm = [p for p in _warm_processes(first.name) if p.info["cmdline"][1:3] == ["-m", "shipyard.runtime.warm"]]
    assert len(warm) == 2 and all("/aiohttp/" in Path(f"/proc/{p.pid}/maps").read_text() for p in warm)
    est.update(keep_alive_period_in_seconds=0)
    assert _wait_for(lambda: not _warm_processes(first.name))


def test_a_pool_expires_and_leaves_nothing(home, source):
    est = _estimator(source, keep_alive_period_in_seconds=2)
    est.fit(logs=False)
    name = est.latest_training_job.name
    assert _warm_processes(name)
    assert _wait_for(lambda: _pool(name).status == "Terminated", timeout=20)
    assert _pool(name).end_reason == "keep-alive period ended"
    keeper = Store().get_job(name).controller_pid
    assert _wait_for(lambda: not psutil.pid_exists(keeper) or psutil.Process(keeper).status() == "zombie")
    assert _wait_for(lambda: not _warm_processes(name))
    retained = est.latest_training_job.describe()["WarmPoolStatus"]["ResourceRetainedBillableTimeInSeconds"]
    assert 1 <= retained <= 4


def test_a_warm_process_killed_while_idle_ends_its_pool_and_the_next_job_starts_cold(home, source):
    est = _estimator(source)
    est.fit(logs=False)
    name = est.latest_training_job.name
    warm = [p for p in _warm_processes(name) if "shipyard.runtime.warm" in p.cmdline() and p.name() != "bwrap"]
    assert len(warm) == 1
    warm[0].kill()
    assert _wait_for(lambda: _pool(name).status == "Terminated")
    assert "died" in _pool(name).end_reason
    est.fit(logs=False)   # no pool to take: a pool of its own
    second = est.latest_training_job
    assert second.describe()["WarmPoolStatus"]["Status"] == "Available"
    assert _pool(second.name).job == second.name
    second.update(0)


def test_a_keeper_killed_while_its_pool_is_available_leaves_no_process(home, source):
    est = _estimator(source)
    est.fit(logs=False)
    name = est.latest_training_job.name
    assert _warm_processes(name)
    os.kill(Store().get_job(name).controller_pid, signal.SIGKILL)
    assert _wait_for(lambda: not _warm_processes(name))   # the sandboxes died with their parent
    listed = json.loads(subprocess.run([sys.executable, "-m", "shipyard.cli.main", "pools", "list", "--all", "--json"],
                                       capture_output=True, text=True, check=True).stdout)
    assert [(p["name"], p["status"]) for p in listed] == [(name, "Terminated")]
    assert listed[0]["end_reason"].startswith("its keeper")
    assert est.latest_training_job.describe()["WarmPoolStatus"]["Status"] == "Terminated"


def test_two_jobs_racing_for_one_pool(home, source):
    est = _estimator(source)
    est.fit(logs=False)
    name = est.latest_training_job.name
    racers = [_estimator(source) for _ in range(2)]
    for racer in racers:
        racer.fit(wait=False)
    for racer in racers:
        racer.latest_training_job.wait(logs=False)
    pools = {racer.latest_training_job.name: PoolStore(Store()).use(racer.latest_training_job.name)["pool"]
             for racer in racers}
    winners = [job for job, pool in pools.items() if pool == name]
    assert len(winners) == 1                                  # one took the kept pool...
    (loser,) = set(pools) - set(winners)
    assert pools[loser] == loser                              # ...the other started cold, a pool of its own
    for racer in racers:
        racer.update(keep_alive_period_in_seconds=0)


def test_releasing_what_cannot_be_released(home, source, wait_for_line):
    run = [sys.executable, "-m", "shipyard.cli.main"]
    missing = subprocess.run([*run, "pools", "release", "nope"], capture_output=True, text=True)
    assert missing.returncode != 0 and "no warm pool named 'nope'" in missing.stderr
    (source / "train.py").write_text("import time\nprint('up', flush=True)\ntime.sleep(60)\n")
    est = _estimator(source)
    est.fit(wait=False)
    name = est.latest_training_job.name
    wait_for_line(home / "jobs" / name / "logs" / "algo-1.log", "up")
    busy = subprocess.run([*run, "pools", "release", name], capture_output=True, text=True)
    assert busy.returncode != 0 and "in use by job" in busy.stderr and "--keep-alive 0" in busy.stderr
    bad = subprocess.run([*run, "jobs", "update", name, "--keep-alive", "-5"], capture_output=True, text=True)
    assert bad.returncode == 2 and "-5" in bad.stderr
    est.latest_training_job.stop()
    est.latest_training_job.describe()
    assert _wait_for(lambda: _pool(name).status == "Available")   # kept after a stop
    released = subprocess.run([*run, "pools", "release", name], capture_output=True, text=True, check=True)
    assert "Terminated" in released.stdout
