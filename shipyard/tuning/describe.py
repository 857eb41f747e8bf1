"""A tuning job as DescribeHyperParameterTuningJob returns it, and its trials as
ListTrainingJobsForHyperParameterTuningJob does (HyperParameterTrainingJobSummary), same field names,
built from the store. Counting is SageMaker's: a trial's job counts under its TrainingJobStatus (a
failure is RetryableError when the platform failed, NonRetryableError when the script or its input did),
its objective is Succeeded when the job emitted one and did not fail (early-stopped jobs included),
Pending while it runs, Failed otherwise. shipyard's own fields (what the trials cost, max_cost) are under
`Shipyard`."""

from __future__ import annotations

import datetime as dt
import time

from shipyard.control.describe import OWN
from shipyard.control.describe import definition as described
from shipyard.spec.tuning import (OBJECTIVE_HYPERPARAMETER, CategoricalRange, ContinuousRange, TrainingDefinition,
                                  TuningSpec)

ARN_PREFIX = "arn:shipyard:sagemaker:local:000000000000:hyper-parameter-tuning-job/"


def _time(ts: float | None) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc) if ts is not None else None


def summaries(store, name: str) -> list[dict]:
    """One HyperParameterTrainingJobSummary per training job the tuning job started, in order."""
    from shipyard.control.reconcile import reconcile
    from shipyard.store.tuning import TuningStore

    tuning = TuningStore(store)
    spec = tuning.get(name).spec
    out = []
    for trial in tuning.trials(name):
        if not store.exists(trial.job):
            continue  # recorded, its job not created yet
        job = reconcile(store, trial.job)
        metric = spec.definition(trial.definition).objective_metric_name
        points = store.metrics(trial.job, metric)
        failed = job.status == "Failed"
        summary = {
            "TrainingJobName": trial.job,
            "TrainingJobArn": f"arn:shipyard:sagemaker:local:000000000000:training-job/{trial.job}",
            "TuningJobName": name,
            "CreationTime": _time(job.creation_time),
            "TrainingStartTime": _time(job.training_start_time),
            "TrainingEndTime": _time(job.training_end_time),
            "TrainingJobStatus": job.status,
            "TunedHyperParameters": {k: str(v) for k, v in trial.hyperparameters.items()},
            "ObjectiveStatus": "Pending" if not job.terminal else
                               "Failed" if failed or not points else "Succeeded",
        }
        if trial.definition is not None:
            summary["TrainingJobDefinitionName"] = trial.definition
        if points:
            summary["FinalHyperParameterTuningJobObjectiveMetric"] = {
                "Type": spec.objective_type, "MetricName": metric, "Value": points[-1]["value"]}
        if job.failure_reason:
            summary["FailureReason"] = job.failure_reason
        if trial.stop_reason and job.status == "Stopped":
            summary["StopReason"] = trial.stop_reason  # shipyard's: why the tuning job stopped it
        out.append(summary)
    return out


def best(spec: TuningSpec, jobs: list[dict]) -> dict | None:
    scored = [j for j in jobs if j["ObjectiveStatus"] == "Succeeded"]
    if not scored:
        return None
    pick = min if spec.objective_type == "Minimize" else max
    return pick(scored, key=lambda j: j["FinalHyperParameterTuningJobObjectiveMetric"]["Value"])


def _counters(jobs: list[dict]) -> tuple[dict, dict]:
    status = {"Completed": 0, "InProgress": 0, "RetryableError": 0, "NonRetryableError": 0, "Stopped": 0}
    objective = {"Succeeded": 0, "Pending": 0, "Failed": 0}
    for job in jobs:
        if job["TrainingJobStatus"] == "Failed":
            platform = job.get("FailureReason", "").startswith("InternalServerError")
            status["RetryableError" if platform else "NonRetryableError"] += 1
        else:
            status["InProgress" if job["TrainingJobStatus"] == "Stopping" else job["TrainingJobStatus"]] += 1
        objective[job["ObjectiveStatus"]] += 1
    return status, objective


def _ranges(definition: TrainingDefinition) -> dict:
    ranges = {"ContinuousParameterRanges": [], "IntegerParameterRanges": [], "CategoricalParameterRanges": []}
    for r in definition.hyperparameter_ranges:
        if isinstance(r, CategoricalRange):
            ranges["CategoricalParameterRanges"].append({"Name": r.name, "Values": list(r.values)})
        else:
            kind = "Continuous" if isinstance(r, ContinuousRange) else "Integer"
            ranges[f"{kind}ParameterRanges"].append({"Name": r.name, "MinValue": str(r.min_value),
                                                     "MaxValue": str(r.max_value), "ScalingType": r.scaling_type})
    return ranges


def describe(store, name: str) -> dict:
    from shipyard.store.tuning import TuningStore
    from shipyard.tuning.completion import not_improving
    from shipyard.tuning.lifecycle import reconcile

    tuning = TuningStore(store)
    record = reconcile(tuning, name)
    spec = record.spec
    jobs = summaries(store, name)
    status_counters, objective_counters = _counters(jobs)
    config = {
        "Strategy": spec.strategy,
        "ResourceLimits": {"MaxNumberOfTrainingJobs": spec.total_jobs(), "MaxParallelTrainingJobs":
                           spec.max_parallel_jobs, **({"MaxRuntimeInSeconds": spec.max_runtime_in_seconds}
                                                      if spec.max_runtime_in_seconds else {})},
        "TrainingJobEarlyStoppingType": spec.early_stopping_type,
    }
    if spec.random_seed is not None:
        config["RandomSeed"] = spec.random_seed
    if spec.strategy == "Hyperband":
        config["StrategyConfig"] = {"HyperbandStrategyConfig": {"MinResource": spec.min_resource(),
                                                                "MaxResource": spec.max_resource()}}
    criteria = spec.completion_criteria
    if criteria is not None:
        config["TuningJobCompletionCriteria"] = {
            **({"TargetObjectiveMetricValue": criteria.target_objective_metric_value}
               if criteria.target_objective_metric_value is not None else {}),
            **({"BestObjectiveNotImproving": {"MaxNumberOfTrainingJobsNotImproving":
                                              criteria.max_number_of_training_jobs_not_improving}}
               if criteria.max_number_of_training_jobs_not_improving else {}),
            **({"ConvergenceDetected": {"CompleteOnConvergence": "Enabled"}} if criteria.complete_on_convergence
               else {}),
        }
    objectives = [j["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] for j in
                  sorted((j for j in jobs if j["ObjectiveStatus"] == "Succeeded"), key=lambda j: j["TrainingEndTime"])]
    end = record.end_time
    description = {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobArn": ARN_PREFIX + name,
        "HyperParameterTuningJobConfig": config,
        "HyperParameterTuningJobStatus": record.status,
        "CreationTime": _time(record.creation_time),
        "LastModifiedTime": _time(record.last_modified_time),
        "TrainingJobStatusCounters": status_counters,
        "ObjectiveStatusCounters": objective_counters,
        "ConsumedResources": {"RuntimeInSeconds": int((end or time.time()) - record.creation_time)},
        "TuningJobCompletionDetails": {
            "NumberOfTrainingJobsObjectiveNotImproving": not_improving(objectives, spec.objective_type == "Minimize"),
            **({"ConvergenceDetectedTime": _time(end)} if record.completion_reason
               and record.completion_reason.startswith("ConvergenceDetected") else {}),
        },
    }
    # One estimator: the objective and ranges in the config; create()'s estimators: each in its definition.
    definitions = [_definition(spec, d) for d in spec.definitions]
    if len(definitions) == 1:
        config["HyperParameterTuningJobObjective"] = definitions[0].pop("TuningObjective")
        config["ParameterRanges"] = definitions[0].pop("HyperParameterRanges")
        description["TrainingJobDefinition"] = definitions[0]
    else:
        description["TrainingJobDefinitions"] = definitions
    if end is not None:
        description["HyperParameterTuningEndTime"] = _time(end)
    if record.completion_reason:
        description["CompletionReason"] = record.completion_reason  # shipyard's: which criterion ended it
    if record.failure_reason:
        description["FailureReason"] = record.failure_reason
    top = best(spec, jobs)
    if top is not None:
        description["BestTrainingJob"] = top
    description[OWN] = {"Cost": {"Currency": "USD", "Amount": round(sum(_cost(store, j["TrainingJobName"])
                                                                         for j in jobs), 6)},
                        **({"MaxCost": spec.max_cost} if spec.max_cost is not None else {})}
    if spec.warm_start is not None:
        description["WarmStartConfig"] = {"WarmStartType": spec.warm_start.type, "ParentHyperParameterTuningJobs": [
            {"HyperParameterTuningJobName": p} for p in spec.warm_start.parents]}
        overall = best(spec, jobs + [j for p in spec.warm_start.parents for j in summaries(store, p)])
        if overall is not None and spec.warm_start.type == "IdenticalDataAndAlgorithm":
            description["OverallBestTrainingJob"] = overall
    return description


def _definition(spec: TuningSpec, definition: TrainingDefinition) -> dict:
    training = described(definition.training)
    training["AlgorithmSpecification"].pop("EnableSageMakerMetricsTimeSeries")   # a training job's only
    return {
        **({"DefinitionName": definition.name} if definition.name else {}),
        "TuningObjective": {"Type": spec.objective_type, "MetricName": definition.objective_metric_name},
        "HyperParameterRanges": _ranges(definition),
        # with the objective's name, which the service adds to every trial (SageMaker's attach removes it)
        "StaticHyperParameters": {**definition.training.hyperparameters,
                                  OBJECTIVE_HYPERPARAMETER: definition.objective_metric_name},
        **training,
    }


def analytics_rows(store, name: str) -> list[dict]:
    """HyperparameterTuningJobAnalytics.dataframe()'s rows: the tuned values (floats where they parse),
    then the job's name, status, final objective and times."""
    rows = []
    for job in summaries(store, name):
        row = {}
        for key, value in job["TunedHyperParameters"].items():
            try:
                row[key] = float(value)
            except ValueError:
                row[key] = value
        start, end = job["TrainingStartTime"], job["TrainingEndTime"]
        row.update({
            "TrainingJobName": job["TrainingJobName"], "TrainingJobStatus": job["TrainingJobStatus"],
            "FinalObjectiveValue": job.get("FinalHyperParameterTuningJobObjectiveMetric", {}).get("Value"),
            "TrainingStartTime": start, "TrainingEndTime": end,
            "TrainingElapsedTimeSeconds": (end - start).total_seconds() if start and end else None,
            **({"TrainingJobDefinitionName": job["TrainingJobDefinitionName"]}
               if "TrainingJobDefinitionName" in job else {}),
        })
        rows.append(row)
    return rows


def _cost(store, job: str) -> float:
    from shipyard.control.describe import describe

    return describe(store, job)[OWN].get("Cost", {}).get("Amount", 0.0)
