"""The one submit path (fit(), `shipyard run` and the server take it), without starting a controller:
what is checked before anything is written, and what a failure after the job is recorded leaves."""

from __future__ import annotations

import pytest

from shipyard.control import submit as submitting
from shipyard.errors import CapacityError, ConflictError
from shipyard.spec.job import JobSpec
from shipyard.store import Store
from shipyard.store.queue import CapacityQueue


def _spec(tmp_path, **fields) -> JobSpec:
    source = f'"file://{tmp_path}/out/job-1/source/sourcedir.tar.gz"'
    return JobSpec(job_name="job-1", output_path=f"file://{tmp_path}/out", **fields,
                   hyperparameters={"sagemaker_program": '"t.py"', "sagemaker_submit_directory": source})


def _pack(directory):
    (directory / "sourcedir.tar.gz").write_bytes(b"code")
    return directory / "sourcedir.tar.gz"


@pytest.fixture
def spawned(monkeypatch):
    calls = []
    monkeypatch.setattr(submitting, "spawn", lambda store, name, handoff=None: calls.append(name))
    return calls


def test_a_job_is_uploaded_recorded_laid_out_and_its_controller_started(tmp_path, spawned):
    store, spec = Store(tmp_path / "home"), _spec(tmp_path)
    submitting.submit(store, spec, _pack)
    assert spawned == ["job-1"]
    assert (tmp_path / "out" / "job-1" / "source" / "sourcedir.tar.gz").read_bytes() == b"code"
    assert store.get_job("job-1").status == "InProgress"
    assert (store.job_dir("job-1") / "plan.json").is_file()
    assert CapacityQueue(store).waiting() == ["job-1"]   # until its controller asks


def test_a_taken_name_or_missing_capacity_writes_nothing(tmp_path, spawned):
    store = Store(tmp_path / "home")
    with pytest.raises(CapacityError):
        submitting.submit(store, _spec(tmp_path, instance_type="ml.m5.4xlarge", instance_count=64), _pack)
    assert not store.exists("job-1") and not (tmp_path / "out").exists()
    submitting.submit(store, _spec(tmp_path), _pack)
    with pytest.raises(ConflictError, match="'job-1' already exists"):
        submitting.submit(store, _spec(tmp_path), lambda d: pytest.fail("packed for a taken name"))
    assert spawned == ["job-1"]


def test_without_pack_the_code_must_already_be_there(tmp_path, spawned):
    store = Store(tmp_path / "home")
    submitting.submit(store, _spec(tmp_path), None)
    # Nothing uploaded; the job's own output directory is there for its sandboxes to bind writable.
    assert spawned == ["job-1"] and not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]


def test_a_controller_that_cannot_start_leaves_the_job_failed_with_the_reason(tmp_path, monkeypatch):
    def no_controller(store, name, handoff=None):
        raise OSError("no more processes")

    monkeypatch.setattr(submitting, "spawn", no_controller)
    store = Store(tmp_path / "home")
    with pytest.raises(OSError):
        submitting.submit(store, _spec(tmp_path), _pack)
    job = store.get_job("job-1")
    assert job.status == "Failed" and job.failure_reason == "InternalServerError: OSError: no more processes"
    assert CapacityQueue(store).waiting() == []   # and it holds nothing: it ended
