"""When a tuning job is done before its max_jobs (spec C.6), as decisions over the final objectives of
the trials that ended, in the order they ended: the target value reached, N jobs in a row that did not
improve on the best by 1 %, convergence, MaxRuntimeInSeconds spent, or (shipyard's) max_cost spent. Convergence is SageMaker's
"further improvement unlikely", made concrete: with at least CONVERGENCE_MIN trials, the latest quarter
of them (at least 5) improved the best by no more than 1 %."""

from __future__ import annotations

from collections.abc import Sequence

IMPROVEMENT = 0.01
CONVERGENCE_MIN = 12
ATTEMPTS = 5   # training jobs that failed, none having succeeded, after which SageMaker fails the tuning job


def _improves(value: float, best: float, minimize: bool) -> bool:
    gain = (best - value) if minimize else (value - best)
    return gain >= IMPROVEMENT * max(abs(best), 1e-12)


def not_improving(objectives: Sequence[float], minimize: bool) -> int:
    """How many trials in a row, up to the latest, did not improve on the best before them by 1 %."""
    best, count = None, 0
    for value in objectives:
        if best is None or _improves(value, best, minimize):
            best, count = value, 0
        else:
            count += 1
            best = min(best, value) if minimize else max(best, value)
    return count


def converged(objectives: Sequence[float], minimize: bool) -> bool:
    if len(objectives) < CONVERGENCE_MIN:
        return False
    window = max(5, len(objectives) // 4)
    pick = min if minimize else max
    return not _improves(pick(objectives), pick(objectives[:-window]), minimize)


def reason_to_complete(spec, objectives: Sequence[float], elapsed: float, spent: float = 0.0,
                       stopping: float = 0.0) -> str | None:
    """Why the tuning job completes now, or None. `objectives`: the ended trials' final objectives;
    `spent`: what every trial has cost so far, `stopping` what stopping the running ones would add."""
    minimize = spec.objective_type == "Minimize"
    criteria = spec.completion_criteria
    if spec.max_runtime_in_seconds is not None and elapsed >= spec.max_runtime_in_seconds:
        return f"MaxRuntimeInSeconds ({spec.max_runtime_in_seconds} s) reached"
    if spec.max_cost is not None and spent + stopping >= spec.max_cost:
        return (f"MaxCost reached: the trials have cost ${spent:,.4f} of max_cost ${spec.max_cost:,.2f} "
                f"(stopping the running ones takes up to ${stopping:,.4f} more)")
    if criteria is None or not objectives:
        return None
    target = criteria.target_objective_metric_value
    if target is not None:
        best = min(objectives) if minimize else max(objectives)
        if (best <= target) if minimize else (best >= target):
            return f"TargetObjectiveMetricValue reached: the objective is {best:.6g}"
    limit = criteria.max_number_of_training_jobs_not_improving
    if limit is not None and not_improving(objectives, minimize) >= limit:
        return f"BestObjectiveNotImproving: {limit} training jobs in a row did not improve the best by 1 %"
    if criteria.complete_on_convergence and converged(objectives, minimize):
        return "ConvergenceDetected: the latest trials improved the best by no more than 1 %"
    return None


def reason_to_fail(statuses: Sequence[str], total_jobs: int) -> str | None:
    """Why the tuning job fails now, as SageMaker words it, or None: no training job has succeeded, and
    ATTEMPTS have failed (or every one it may start, when that is fewer). `statuses`: those of the trials'
    jobs that ended (a stopped one is no failure: early stopping and Hyperband's pauses stop them)."""
    failed = sum(status == "Failed" for status in statuses)
    if "Completed" in statuses or not failed or failed < min(ATTEMPTS, total_jobs):
        return None
    return (f"No training job succeeded after {failed} attempts. Please take a look at the training job failures "
            "to get more details.")
