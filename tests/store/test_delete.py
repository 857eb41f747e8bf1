"""Deleting what the store keeps of ended jobs (`shipyard jobs delete`, `jobs prune`): every row naming
the job and its directory go, other jobs stay; a job not ended, a tuning job's trial (it goes with its
tuning job) and a job whose warm pool lives are refused; prunable() lists what may go."""

from __future__ import annotations

import sqlite3
import time

import pytest

from shipyard.errors import ConflictError, NotFoundError, ValidationError
from shipyard.spec.job import JobSpec
from shipyard.spec.tuning import TuningSpec
from shipyard.store import Store
from shipyard.store.db import JOB_ROWS
from shipyard.store.pools import PoolStore
from shipyard.store.queue import CapacityQueue
from shipyard.store.tuning import TuningStore, events_key


def _spec(name: str) -> JobSpec:
    return JobSpec(job_name=name, instance_count=1, output_path="file:///out",
                   hyperparameters={"sagemaker_program": '"t.py"'})


def _job(store: Store, name: str, status: str | None = "Completed", end: float | None = None) -> None:
    """A job with rows in every table it may have and a log; `status`: where it ended (None: it runs)."""
    store.create_job(_spec(name))
    store.start_attempt(name, 1.0)
    store.add_event(name, "info", "hello")
    store.add_metrics(name, [("loss", "algo-1", 1.0, 0.5)])
    store.set_rule_status(name, "debugger", "LossNotDecreasing", "NoIssuesFound")
    CapacityQueue(store).enqueue(name, 1, 0)
    store.log_path(name, "algo-1").parent.mkdir(parents=True)
    store.log_path(name, "algo-1").write_text("epoch 1\n")
    if status:
        store.transition(name, status, status)
        if end is not None:
            store.update_job(name, training_end_time=end)


def _rows(store: Store, name: str) -> dict[str, int]:
    db = sqlite3.connect(store.path)
    try:
        return {table: db.execute(f"SELECT COUNT(*) FROM {table} WHERE {column}=?", (name,)).fetchone()[0]
                for table, column in JOB_ROWS}
    finally:
        db.close()


def _pool(pools: PoolStore, job: str) -> None:
    pools.create(job, instance_type="local", instance_count=1, backend="local", keep_alive=60, keeper=(1, 0.0),
                 members={}, preload=())


def _tuning(store: Store, name: str = "tune") -> TuningStore:
    training = JobSpec(job_name=name, output_path="file:///out", metric_definitions=({"Name": "loss",
                       "Regex": "loss=([0-9.]+)"},), hyperparameters={"sagemaker_program": '"t.py"'})
    tuning = TuningStore(store)
    tuning.create(TuningSpec(tuning_job_name=name, training=training, objective_metric_name="loss",
                             hyperparameter_ranges=[{"kind": "integer", "name": "w", "min_value": 1, "max_value": 4}]))
    return tuning


def test_deleting_a_job_removes_its_rows_and_directory_and_nothing_of_another(tmp_path):
    store = Store(tmp_path)
    _job(store, "job-1")
    _job(store, "job-2", "Failed")
    kept = _rows(store, "job-2")
    assert {table for table, count in kept.items() if count} == {table for table, _ in JOB_ROWS} - {
        "pool_uses", "tuning_trials"}   # the tests below have those
    assert _rows(store, "job-1") == kept
    store.delete_job("job-1")
    assert set(_rows(store, "job-1").values()) == {0}
    assert not store.job_dir("job-1").exists()
    assert _rows(store, "job-2") == kept and store.log_path("job-2", "algo-1").read_text() == "epoch 1\n"
    assert [job.name for job in store.list_jobs()] == ["job-2"]
    with pytest.raises(NotFoundError, match="did you mean 'job-2'"):
        store.delete_job("job-1")


def test_a_job_not_ended_is_refused_and_kept_whole(tmp_path):
    store = Store(tmp_path)
    _job(store, "job-1", status=None)
    rows = _rows(store, "job-1")
    with pytest.raises(ConflictError, match=r"has not ended \(it is InProgress\).*shipyard jobs stop job-1"):
        store.delete_job("job-1")
    assert _rows(store, "job-1") == rows and store.log_path("job-1", "algo-1").exists()


def test_a_job_goes_once_its_warm_pool_has_ended_and_the_pool_with_its_last_job(tmp_path):
    store = Store(tmp_path)
    pools = PoolStore(store)
    _job(store, "a")
    _pool(pools, "a")
    pools.keep("a")
    with pytest.raises(ConflictError, match="is on warm pool 'a', which is Available"):
        store.delete_job("a")
    _job(store, "b", status=None)
    pools.claim("b", instance_type="local", instance_count=1, backend="local", keep_alive=0)
    with pytest.raises(ConflictError, match=r"started warm pool 'a', which is InUse \(job 'b' is on it\)"):
        store.delete_job("a")
    store.transition("b", "Completed", "Completed")
    pools.terminate("a", "Released by the user")
    store.delete_job("a")
    assert pools.get("a").status == "Terminated" and pools.warm_pool_status("b")["Status"] == "Terminated"
    store.delete_job("b")
    assert pools.list() == []


def test_a_trial_goes_with_its_tuning_job_once_all_have_ended(tmp_path):
    store = Store(tmp_path)
    tuning = _tuning(store)
    _job(store, "tune-001", status=None)
    tuning.add_trial("tune", "tune-001", 0, None, {"w": 1})
    tuning.add_trial("tune", "tune-002", 1, None, {"w": 2})   # recorded, its job not made yet
    store.add_event(events_key("tune"), "info", "started")
    tuning.directory("tune").mkdir(parents=True)
    (tuning.directory("tune") / "tuning.log").write_text("...")
    _job(store, "other")
    with pytest.raises(ConflictError, match="trial of tuning job 'tune'.*shipyard tuning delete tune"):
        store.delete_job("tune-001")
    with pytest.raises(ConflictError, match=r"tuning job 'tune' has not ended \(it is InProgress\)"):
        tuning.delete("tune")
    tuning.set_status("tune", "Stopped")
    with pytest.raises(ConflictError, match="job 'tune-001' has not ended"):
        tuning.delete("tune")
    assert len(tuning.trials("tune")) == 2 and tuning.directory("tune").exists()
    store.transition("tune-001", "Stopped", "Stopped")
    tuning.delete("tune")
    assert not tuning.exists("tune") and tuning.trials("tune") == [] and store.events(events_key("tune")) == []
    assert not tuning.directory("tune").exists() and not store.job_dir("tune-001").exists()
    assert set(_rows(store, "tune-001").values()) == {0}
    assert [job.name for job in store.list_jobs()] == ["other"]
    with pytest.raises(NotFoundError):
        tuning.delete("tune")


def test_prunable_lists_the_ended_jobs_that_may_go_by_end_time_and_status(tmp_path):
    store = Store(tmp_path)
    _job(store, "old-completed", "Completed", end=100.0)
    _job(store, "old-failed", "Failed", end=200.0)
    _job(store, "new-stopped", "Stopped", end=1000.0)
    _job(store, "never-trained", "Failed")   # ended now, by its last change
    _job(store, "running", status=None)
    _job(store, "trial", end=50.0)
    _tuning(store).add_trial("tune", "trial", 0, None, {"w": 1})
    _job(store, "pooled", end=60.0)
    _pool(PoolStore(store), "pooled")
    PoolStore(store).keep("pooled")
    assert store.prunable() == ["old-completed", "old-failed", "new-stopped", "never-trained"]
    assert store.prunable(before=500.0) == ["old-completed", "old-failed"]
    assert store.prunable(status="Failed") == ["old-failed", "never-trained"]
    assert store.prunable(before=150.0, status="Completed") == ["old-completed"]
    assert store.prunable(before=time.time() - 3600, status="Failed") == ["old-failed"]
    with pytest.raises(ValidationError, match="status='InProgress'"):
        store.prunable(status="InProgress")
