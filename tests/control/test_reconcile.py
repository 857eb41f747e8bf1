"""Reconciling a job whose controller died, without running one: what the record becomes, how retries
are counted, and that two processes noticing at once start one new controller."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from shipyard.control import controller, reconcile
from shipyard.spec.job import JobSpec
from shipyard.store import Store


def _dead_job(store: Store, retries: int, name: str = "job-1") -> None:
    store.create_job(JobSpec(job_name=name, instance_count=1, output_path="file:///out", max_retry_attempts=retries,
                             hyperparameters={"sagemaker_program": '"t.py"'}))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store.update_job(name, controller_pid=dead.pid, controller_started=None)
    store.transition(name, "InProgress", "Training", "Training in progress")
    store.start_attempt(name, 1.0)


@pytest.fixture
def spawned(monkeypatch):
    calls = []
    monkeypatch.setattr(controller, "spawn", lambda store, name, continuing=False: calls.append((name, continuing)))
    return calls


def test_without_retries_the_job_fails_and_its_attempt_ends(tmp_path, spawned):
    store = Store(tmp_path)
    _dead_job(store, retries=0)
    record = reconcile.reconcile(store, "job-1")
    assert (record.status, record.secondary_status) == ("Failed", "Failed")
    assert "controller (pid" in record.failure_reason
    assert [(a["outcome"], a["end_time"] is not None) for a in store.attempts("job-1")] == [("Failed", True)]
    assert spawned == []


def test_with_a_retry_left_a_new_controller_continues_once(tmp_path, spawned):
    store = Store(tmp_path)
    _dead_job(store, retries=1)
    record = reconcile.reconcile(store, "job-1")
    assert (record.status, record.secondary_status) == ("InProgress", "Starting")
    assert record.transitions[-1].message == "Retrying after a platform failure (retry 1 of 1)"
    assert spawned == [("job-1", True)]
    # The new controller dies too (its pid is still the dead one here): no retries are left now.
    store.start_attempt("job-1", 2.0)
    record = reconcile.reconcile(store, "job-1")
    assert record.status == "Failed"
    assert [a["outcome"] for a in store.attempts("job-1")] == ["Failed", "Failed"]
    assert spawned == [("job-1", True)]


def test_a_stop_requested_before_the_controller_died_ends_stopped(tmp_path, spawned):
    store = Store(tmp_path)
    _dead_job(store, retries=3)
    store.request_stop("job-1")
    record = reconcile.reconcile(store, "job-1")
    assert (record.status, record.secondary_status) == ("Stopped", "Stopped")
    assert spawned == []


def test_two_processes_noticing_at_once_start_one_controller(tmp_path, monkeypatch):
    store = Store(tmp_path)
    _dead_job(store, retries=5)
    calls, entered, release = [], threading.Event(), threading.Event()

    def slow_spawn(store, name, continuing=False):
        calls.append(name)
        entered.set()
        release.wait(10)   # the other reader arrives while this one still decides

    monkeypatch.setattr(controller, "spawn", slow_spawn)
    first = threading.Thread(target=reconcile.reconcile, args=(Store(tmp_path), "job-1"))
    first.start()
    assert entered.wait(10)
    reconcile.reconcile(Store(tmp_path), "job-1")   # finds the lock held: reads, decides nothing
    release.set()
    first.join(10)
    assert calls == ["job-1"]
