"""A tuning job whose process died: the next reader starts a new one that continues; after
MAX_RESTARTS the tuning job ends Failed naming the log, its running trials asked to stop. Nothing here
starts a process (spawn is replaced)."""

from __future__ import annotations

import pytest

from shipyard.spec.job import JobSpec
from shipyard.spec.tuning import TuningSpec
from shipyard.store import Store
from shipyard.store.tuning import TuningStore
from shipyard.tuning import lifecycle

LOSS = {"Name": "loss", "Regex": "loss=([0-9.]+)"}


def _spec(name="tune") -> TuningSpec:
    training = JobSpec(job_name=name, output_path="file:///out", metric_definitions=(LOSS,),
                       hyperparameters={"sagemaker_program": '"t.py"', "sagemaker_submit_directory": '"file:///c"'})
    return TuningSpec(tuning_job_name=name, training=training, objective_metric_name="loss",
                      hyperparameter_ranges=[{"kind": "integer", "name": "w", "min_value": 1, "max_value": 4}])


@pytest.fixture
def tuning(tmp_path, monkeypatch):
    spawned = []
    monkeypatch.setattr(lifecycle, "spawn", lambda tuning, name: spawned.append(name))
    store = TuningStore(Store(tmp_path / "home"))
    store.spawned = spawned
    return store


def _dead(tuning, name="tune", restarts=0):
    tuning.create(_spec(name))
    tuning.update(name, controller_pid=2**22 + 1, controller_started=1.0, restarts=restarts)  # no such process


def test_a_dead_tuning_process_is_replaced(tuning):
    _dead(tuning)
    assert lifecycle.reconcile(tuning, "tune").status == "InProgress"
    assert tuning.spawned == ["tune"] and tuning.get("tune").restarts == 1


def test_one_that_keeps_dying_leaves_the_tuning_job_failed_and_stops_its_trials(tuning):
    store = tuning.store
    _dead(tuning, restarts=lifecycle.MAX_RESTARTS)
    trial = JobSpec(job_name="tune-001-x", output_path="file:///out")
    store.create_job(trial)
    tuning.add_trial("tune", "tune-001-x", 0, None, {"w": 2})
    tuning.update_trial("tune", "tune-001-x", state="running")
    record = lifecycle.reconcile(tuning, "tune")
    assert record.status == "Failed" and tuning.spawned == []
    assert record.failure_reason.startswith("InternalServerError: the tuning process") and "tuning.log" in record.failure_reason
    assert store.stop_requested("tune-001-x")


def test_a_warm_start_parent_must_exist_have_ended_and_share_the_objective(tuning):
    from shipyard.errors import NotFoundError, ValidationError

    child = TuningSpec.model_validate({**_spec("child").model_dump(), "warm_start": {"type": "TransferLearning",
                                                                                      "parents": ["tune"]}})
    with pytest.raises(NotFoundError, match="no tuning job named 'tune'"):
        lifecycle.check_warm_start(tuning, child)
    tuning.create(_spec("tune"))  # its process not started yet: it counts as alive for a while
    with pytest.raises(ValidationError, match=r"parents\['tune'\]='InProgress': a warm-start parent must have ended"):
        lifecycle.check_warm_start(tuning, child)
    tuning.set_status("tune", "Completed")
    lifecycle.check_warm_start(tuning, child)
