"""When a tuning job completes before max_jobs (spec C.6), as decisions over the ended trials' final
objectives: the target, N trials without a 1 % improvement, convergence, MaxRuntimeInSeconds."""

from __future__ import annotations

import pytest

from shipyard.spec.job import JobSpec
from shipyard.spec.tuning import TuningSpec
from shipyard.tuning.completion import ATTEMPTS, converged, not_improving, reason_to_complete, reason_to_fail

LR = {"kind": "continuous", "name": "lr", "min_value": 1e-4, "max_value": 0.1}


def _spec(objective_type="Minimize", **fields) -> TuningSpec:
    training = JobSpec(job_name="t", output_path="file:///out", metric_definitions=({"Name": "loss", "Regex": "l=(.+)"},),
                       hyperparameters={"sagemaker_program": '"t.py"'})
    return TuningSpec(tuning_job_name="t", training=training, hyperparameter_ranges=[LR], objective_metric_name="loss",
                      objective_type=objective_type, max_jobs=50, **fields)


@pytest.mark.parametrize("objectives, minimize, count", [
    ([1.0, 0.9, 0.8], True, 0),             # each improves by more than 1 %
    ([1.0, 0.995, 0.999, 1.2], True, 3),    # 0.5 % is not an improvement
    ([1.0, 2.0, 0.5, 0.6], True, 1),        # counted from the latest improvement
    ([1.0, 1.005, 0.9], False, 2),          # maximising
])
def test_trials_in_a_row_not_improving_by_one_percent(objectives, minimize, count):
    assert not_improving(objectives, minimize) == count


def test_convergence_needs_enough_trials_and_a_flat_latest_quarter():
    improving = [1.0 - 0.05 * i for i in range(12)]
    flat = [1.0 - 0.05 * i for i in range(7)] + [0.7] * 5
    assert not converged(flat[:11], minimize=True)  # too few trials to say
    assert converged(flat, minimize=True) and not converged(improving, minimize=True)


def test_each_criterion_names_itself():
    assert reason_to_complete(_spec(), [0.5], elapsed=10) is None  # no criteria: max_jobs only
    target = _spec(completion_criteria={"target_objective_metric_value": 0.2})
    assert reason_to_complete(target, [0.5, 0.3], 10) is None
    assert reason_to_complete(target, [0.5, 0.19], 10).startswith("TargetObjectiveMetricValue reached")
    assert reason_to_complete(_spec("Maximize", completion_criteria={"target_objective_metric_value": 0.9}),
                              [0.95], 10).startswith("TargetObjectiveMetricValue")
    stale = _spec(completion_criteria={"max_number_of_training_jobs_not_improving": 3})
    assert reason_to_complete(stale, [1.0, 1.0, 1.0], 10) is None
    assert reason_to_complete(stale, [1.0, 1.0, 1.0, 1.0], 10).startswith("BestObjectiveNotImproving: 3")
    flat = [1.0 - 0.05 * i for i in range(7)] + [0.7] * 5
    assert reason_to_complete(_spec(completion_criteria={"complete_on_convergence": True}), flat, 10).startswith(
        "ConvergenceDetected")
    assert reason_to_complete(_spec(max_runtime_in_seconds=120), [], 121) == "MaxRuntimeInSeconds (120 s) reached"


@pytest.mark.parametrize("statuses, total_jobs, fails", [
    (["Failed"] * (ATTEMPTS - 1), 50, False),              # not yet: SageMaker gives it five attempts
    (["Failed"] * ATTEMPTS, 50, True),
    (["Failed"] * 2, 2, True),                              # every job it may start failed
    (["Failed"] * ATTEMPTS + ["Completed"], 50, False),     # one succeeded: the failures are only counted
    (["Stopped"] * ATTEMPTS, 50, False),                    # stopped (early stopping, Hyperband) is no failure
    ([], 1, False),
])
def test_a_tuning_job_fails_when_its_first_attempts_all_failed(statuses, total_jobs, fails):
    reason = reason_to_fail(statuses, total_jobs)
    assert (reason is not None) == fails
    if fails:
        assert reason == (f"No training job succeeded after {statuses.count('Failed')} attempts. Please take a look "
                          "at the training job failures to get more details.")
