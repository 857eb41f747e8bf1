"""The store's guarantees: unique names, terminal statuses that never move, attempts in order, and
records that many processes can write at once."""

from __future__ import annotations

import multiprocessing

import pytest

from shipyard.errors import ConflictError, NotFoundError
from shipyard.spec.job import JobSpec
from shipyard.store import Store


def _spec(name: str = "job-1") -> JobSpec:
    return JobSpec(job_name=name, instance_count=1, output_path="file:///out",
                   hyperparameters={"sagemaker_program": '"t.py"'})


def test_names_are_unique_and_misspellings_get_a_suggestion(tmp_path):
    store = Store(tmp_path)
    store.create_job(_spec())
    with pytest.raises(ConflictError, match="job-1"):
        store.create_job(_spec())
    with pytest.raises(NotFoundError, match="did you mean 'job-1'"):
        store.get_job("job-2x")


def test_transitions_are_recorded_and_a_terminal_status_never_moves(tmp_path):
    store = Store(tmp_path)
    store.create_job(_spec())
    assert store.transition("job-1", "InProgress", "Downloading", "Downloading input data")
    assert store.transition("job-1", "Completed", "Completed")
    assert not store.transition("job-1", "Failed", "Failed", "late writer")
    record = store.get_job("job-1")
    assert (record.status, record.secondary_status) == ("Completed", "Completed")
    assert [t.status for t in record.transitions] == ["Starting", "Downloading", "Completed"]
    assert all(t.end_time is not None for t in record.transitions)
    assert not store.request_stop("job-1")  # nothing to stop


def test_news_of_the_same_step_updates_its_message_instead_of_adding_a_transition(tmp_path):
    store = Store(tmp_path)
    store.create_job(_spec())
    assert store.transition("job-1", "InProgress", "Starting", "Waiting for capacity: 2nd in the queue")
    assert store.transition("job-1", "InProgress", "Starting", "Waiting for capacity: 1st in the queue")
    assert store.transition("job-1", "InProgress", "Training", "Training in progress")
    assert [(t.status, t.message) for t in store.get_job("job-1").transitions] == [
        ("Starting", "Waiting for capacity: 1st in the queue"), ("Training", "Training in progress")]


def test_a_stop_keeps_the_first_reason_given(tmp_path):
    store = Store(tmp_path)
    store.create_job(_spec())
    store.create_job(_spec("job-2"))
    assert store.stop_requested("job-1") is None
    assert store.request_stop("job-1") and store.stop_requested("job-1") == "Stop requested"
    assert store.request_stop("job-2", "Early stopping: worse than the median")
    assert store.request_stop("job-2", "a second thought")
    assert store.stop_requested("job-2") == "Early stopping: worse than the median"
    assert store.get_job("job-2").stop_requested


def test_attempts_events_and_interrupt_requests(tmp_path):
    store = Store(tmp_path)
    store.create_job(_spec())
    assert store.start_attempt("job-1", 10.0) == 1
    store.update_attempt("job-1", 1, end_time=20.0, outcome="Interrupted", restored_checkpoint="")
    assert store.start_attempt("job-1", 30.0) == 2
    assert [(a["number"], a["outcome"]) for a in store.attempts("job-1")] == [(1, "Interrupted"), (2, None)]
    store.add_event("job-1", "info", "one")
    first = store.events("job-1")[-1]["id"]
    store.add_event("job-1", "warning", "two")
    assert [e["message"] for e in store.events("job-1", after=first)] == ["two"]
    assert store.request_interrupt("job-1", "algo-1")
    assert store.take_interrupt_request("job-1") == "algo-1"
    assert store.take_interrupt_request("job-1") is None


def _write_events(home: str, count: int) -> None:
    store = Store(home)
    for i in range(count):
        store.add_event("job-1", "info", str(i))


def test_many_processes_write_at_once(tmp_path):
    Store(tmp_path).create_job(_spec())
    procs = [multiprocessing.Process(target=_write_events, args=(str(tmp_path), 50)) for _ in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert len(Store(tmp_path).events("job-1")) == 200


def test_a_jobs_metric_series_are_its_names_and_hosts_without_its_points(tmp_path):
    store = Store(tmp_path)
    store.create_job(_spec())
    store.create_job(_spec("job-2"))
    store.add_metrics("job-1", [("loss", "algo-1", 10.0, 1.0), ("loss", "algo-1", 20.0, 0.5),
                                ("loss", "algo-2", 30.0, 0.4), ("accuracy", "algo-1", 5.0, 0.9)])
    store.add_metrics("job-2", [("loss", "algo-3", 10.0, 1.0)])
    assert store.metric_series("job-1") == {"loss": {"algo-1", "algo-2"}, "accuracy": {"algo-1"}}
    assert store.metric_series("job-1", "loss") == {"loss": {"algo-1", "algo-2"}}
    assert store.metric_series("job-1", since=20.0) == {"loss": {"algo-1", "algo-2"}}
    assert store.metric_series("job-1", since=25.0) == {"loss": {"algo-2"}}
    assert store.metric_series("job-3") == {}
