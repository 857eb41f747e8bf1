"""Tuning jobs: the list, one tuning job with its trials (each one's tuned values as numbers where they
are numbers, for the charts), and stop."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from shipyard.server.app import reader, writer
from shipyard.store import Store

router = APIRouter(tags=["tuning"])
Reader = Annotated[Store, Depends(reader)]
Writer = Annotated[Store, Depends(writer)]


def _tuning(store: Store):
    from shipyard.store.tuning import TuningStore

    return TuningStore(store)


@router.get("/tuning")
def list_tuning(store: Reader) -> list[dict]:
    """Tuning jobs newest first: status, strategy, objective, trials done of the total, the best so far."""
    from shipyard.tuning.describe import describe

    rows = []
    for record in _tuning(store).list():
        description = describe(store, record.name)   # reconciles: a dead tuning process's job is taken over
        counters = description["TrainingJobStatusCounters"]
        best = description.get("BestTrainingJob")
        rows.append({"name": record.name, "status": description["HyperParameterTuningJobStatus"],
                     "strategy": record.spec.strategy, "objective_type": record.spec.objective_type,
                     "creation_time": record.creation_time, "end_time": description.get("HyperParameterTuningEndTime"),
                     "jobs_done": sum(counters.values()) - counters["InProgress"],
                     "jobs_total": record.spec.total_jobs(),
                     "best_job": best and best["TrainingJobName"],
                     "best_value": best and best["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]})
    return rows


@router.get("/tuning/{name}")
def get_tuning(store: Reader, name: str) -> dict:
    """DescribeHyperParameterTuningJob (`describe`) and every trial (`trials`: its training job's summary
    with the tuned values as numbers where they are, and its objective)."""
    from shipyard.tuning.describe import describe, summaries

    description = describe(store, name)
    trials = []
    for number, job in enumerate(summaries(store, name), 1):
        metric = job.get("FinalHyperParameterTuningJobObjectiveMetric")
        trials.append({"trial": number, "job": job["TrainingJobName"], "status": job["TrainingJobStatus"],
                       "objective_status": job["ObjectiveStatus"], "objective": metric and metric["Value"],
                       "hyperparameters": {k: _number(v) for k, v in job["TunedHyperParameters"].items()},
                       "stop_reason": job.get("StopReason"), "creation_time": job["CreationTime"],
                       "end_time": job["TrainingEndTime"]})
    return {"describe": description, "trials": trials}


def _number(value: str) -> float | str:
    try:
        return float(value)
    except ValueError:
        return value


@router.post("/tuning/{name}/stop")
def stop_tuning(store: Writer, name: str) -> dict:
    """Stop the tuning job and every training job it is running (as `shipyard tuning stop`)."""
    from shipyard.errors import ConflictError
    from shipyard.tuning.lifecycle import stop

    tuning = _tuning(store)
    if not stop(tuning, name):
        raise ConflictError(f"tuning job {name} already ended {tuning.get(name).status}; there is nothing to stop")
    return {"name": name, "status": tuning.get(name).status}
