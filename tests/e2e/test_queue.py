"""Many jobs submitted at once wait in the capacity queue (store/queue.py) instead of all starting on this
small machine, and all complete: never more instances at once than it runs side by side
(SHIPYARD_LOCAL_MAX_INSTANCES here, so they really queue). Scripts print and exit, so the test measures
the queue, not training."""

from __future__ import annotations

import os
import signal
import time

import pytest

from shipyard import Estimator
from shipyard.cli.main import cli
from shipyard.store import Store

pytestmark = pytest.mark.slow
JOBS, LIMIT = 50, 4


def test_fifty_jobs_submitted_at_once_queue_and_all_complete(home, tmp_path, monkeypatch):
    from click.testing import CliRunner

    monkeypatch.setenv("SHIPYARD_LOCAL_MAX_INSTANCES", str(LIMIT))
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('trained')\n")
    jobs = []
    for i in range(JOBS):
        estimator = Estimator(entry_point="train.py", source_dir=str(source), instance_count=1 + i % 2)
        estimator.fit(wait=False, job_name=f"queued-{i:02d}")
        jobs.append(estimator.latest_training_job)
    # Submitting takes far less than running 50 jobs 4 instances at a time: most still wait, in sight.
    assert " in queue)" in CliRunner().invoke(cli, ["jobs", "list"]).stdout
    assert [job.wait(logs=False)["TrainingJobStatus"] for job in jobs] == ["Completed"] * JOBS

    store = Store(home)
    changes = []   # (time, instances started or ended) over every attempt of every job
    for i, job in enumerate(jobs):
        (attempt,) = store.attempts(job.name)
        changes += [(attempt["start_time"], 1 + i % 2), (attempt["end_time"], -(1 + i % 2))]
    running, most = 0, 0
    for _, change in sorted(changes):
        running += change
        most = max(most, running)
    assert 2 <= most <= LIMIT   # side by side, and never more than the machine runs
    waited = [job.name for job in jobs
              if any(t.message.startswith("Waited ") for t in store.get_job(job.name).transitions)]
    assert len(waited) > JOBS // 2


def test_a_job_waiting_behind_one_whose_controller_was_killed_is_not_blocked(home, tmp_path, monkeypatch,
                                                                            wait_for_line):
    monkeypatch.setenv("SHIPYARD_LOCAL_MAX_INSTANCES", "1")
    source = tmp_path / "src"
    source.mkdir()
    (source / "hold.py").write_text("import time\nprint('holding', flush=True)\ntime.sleep(300)\n")
    (source / "train.py").write_text("print('trained')\n")
    store = Store(home)
    Estimator(entry_point="hold.py", source_dir=str(source)).fit(wait=False, job_name="holder")
    wait_for_line(store.log_path("holder", "algo-1"), "holding")
    waiter = Estimator(entry_point="train.py", source_dir=str(source))
    waiter.fit(wait=False, job_name="waiter")
    deadline = time.monotonic() + 30
    while not store.get_job("waiter").transitions[-1].message.startswith("Waiting for capacity: 1st in the queue"):
        assert time.monotonic() < deadline, store.get_job("waiter").transitions
        time.sleep(0.1)
    os.kill(store.get_job("holder").controller_pid, signal.SIGKILL)
    assert waiter.latest_training_job.wait(logs=False)["TrainingJobStatus"] == "Completed"
    holder = store.get_job("holder")   # reconciled by the job waiting behind it
    assert holder.status == "Failed" and "controller (pid" in holder.failure_reason
