"""Tuning jobs through SageMaker's API: CreateHyperParameterTuningJob becomes a TuningSpec (spec/tuning.py,
its training job definitions as training.py reads them) submitted as `HyperparameterTuner.fit()` submits;
the descriptions are tuning/describe.py's without shipyard's own fields."""

from __future__ import annotations

from typing import Any

from shipyard.server.aws.protocol import ACCOUNT, AwsError, Call
from shipyard.server.aws.sagemaker import training

ARN = "arn:aws:sagemaker:{region}:" + ACCOUNT + ":hyper-parameter-tuning-job/{name}"
OWN = "Shipyard"
RANGE_KINDS = {"ContinuousParameterRanges": "continuous", "IntegerParameterRanges": "integer",
               "CategoricalParameterRanges": "categorical"}


def _ranges(ranges: dict) -> list[dict[str, Any]]:
    out = []
    for member, kind in RANGE_KINDS.items():
        for r in ranges.get(member) or ():
            if kind == "categorical":
                out.append({"kind": kind, "name": r["Name"], "values": r["Values"]})
            else:
                out.append({"kind": kind, "name": r["Name"], "min_value": r["MinValue"], "max_value": r["MaxValue"],
                            "scaling_type": r.get("ScalingType", "Auto")})
    return out


def _definition(definition: dict, config: dict, name: str) -> dict[str, Any]:
    """One HyperParameterTrainingJobDefinition; its objective and ranges are the config's when it has none."""
    objective = definition.get("TuningObjective") or config.get("HyperParameterTuningJobObjective")
    ranges = definition.get("HyperParameterRanges") or config.get("ParameterRanges")
    if not objective or not ranges:
        raise AwsError("ValidationException", "a tuning job needs HyperParameterTuningJobObjective and "
                                              "ParameterRanges (in the config, or in each TrainingJobDefinition)")
    fields = training.job_fields(definition, name)
    return {"name": definition.get("DefinitionName"), "training": fields, "hyperparameter_ranges": _ranges(ranges),
            "objective_metric_name": objective["MetricName"],
            # SageMaker passes tuned values to the script as plain strings (the SDK encodes only static ones)
            "encoding": "str"}


def tuning_spec(request: dict):
    from shipyard.spec.build import build
    from shipyard.spec.tuning import TuningSpec

    name = request["HyperParameterTuningJobName"]
    config = request["HyperParameterTuningJobConfig"]
    definitions = request.get("TrainingJobDefinitions") or [request.get("TrainingJobDefinition")]
    if not definitions[0]:
        raise AwsError("ValidationException", "give TrainingJobDefinition (or TrainingJobDefinitions)")
    many = len(definitions) > 1
    limits = config.get("ResourceLimits") or {}
    objective = config.get("HyperParameterTuningJobObjective") or definitions[0].get("TuningObjective") or {}
    strategy_config = (config.get("StrategyConfig") or {}).get("HyperbandStrategyConfig")
    criteria = config.get("TuningJobCompletionCriteria")
    warm = request.get("WarmStartConfig")
    return build(TuningSpec, "", **{key: value for key, value in dict(
        tuning_job_name=name,
        definitions=[_definition(d, config, f"{name}-{i}" if many else name) for i, d in enumerate(definitions, 1)],
        objective_type=objective.get("Type", "Maximize"), strategy=config.get("Strategy", "Bayesian"),
        max_jobs=limits.get("MaxNumberOfTrainingJobs"), max_parallel_jobs=limits.get("MaxParallelTrainingJobs", 1),
        max_runtime_in_seconds=limits.get("MaxRuntimeInSeconds"),
        early_stopping_type=config.get("TrainingJobEarlyStoppingType", "Off"),
        random_seed=config.get("RandomSeed"),
        hyperband=None if strategy_config is None else {"min_resource": strategy_config.get("MinResource"),
                                                        "max_resource": strategy_config.get("MaxResource")},
        completion_criteria=None if criteria is None else {
            "target_objective_metric_value": criteria.get("TargetObjectiveMetricValue"),
            "max_number_of_training_jobs_not_improving": (criteria.get("BestObjectiveNotImproving") or {}).get(
                "MaxNumberOfTrainingJobsNotImproving"),
            "complete_on_convergence": (criteria.get("ConvergenceDetected") or {}).get(
                "CompleteOnConvergence") == "Enabled"},
        warm_start=None if warm is None else {
            "type": warm["WarmStartType"],
            "parents": [p["HyperParameterTuningJobName"] for p in warm["ParentHyperParameterTuningJobs"]]},
    ).items() if value is not None})


def _tuning(call: Call):
    from shipyard.store.tuning import TuningStore

    return TuningStore(call.store)


def _known(call: Call, name: str) -> None:
    if not _tuning(call).exists(name):
        raise AwsError("ResourceNotFound", f"Amazon SageMaker can't find a tuning job with name {name}")


def create_hyper_parameter_tuning_job(call: Call, request: dict) -> dict:
    from shipyard.tuning import lifecycle

    name = request["HyperParameterTuningJobName"]
    if _tuning(call).exists(name):
        raise AwsError("ResourceInUse", f"A tuning job named {name} already exists")
    lifecycle.submit(call.store, tuning_spec(request))   # the SDK uploaded each definition's code already
    return {"HyperParameterTuningJobArn": ARN.format(region=call.region, name=name)}


def describe_hyper_parameter_tuning_job(call: Call, request: dict) -> dict:
    from shipyard.tuning.describe import describe

    name = request["HyperParameterTuningJobName"]
    _known(call, name)
    description = describe(call.store, name)
    description.pop(OWN, None)
    description["HyperParameterTuningJobArn"] = ARN.format(region=call.region, name=name)
    for job in (description.get("BestTrainingJob"), description.get("OverallBestTrainingJob")):
        if job:
            job["TrainingJobArn"] = training.arn(call, job["TrainingJobName"])
    return description


def list_hyper_parameter_tuning_jobs(call: Call, request: dict) -> dict:
    from shipyard.tuning.describe import describe

    records = _tuning(call).list()
    contains, status = request.get("NameContains"), request.get("StatusEquals")
    rows = []
    for record in records:
        if contains and contains not in record.name:
            continue
        d = describe(call.store, record.name)
        if status and d["HyperParameterTuningJobStatus"] != status:
            continue
        config = d["HyperParameterTuningJobConfig"]
        rows.append({"HyperParameterTuningJobName": record.name,
                     "HyperParameterTuningJobArn": ARN.format(region=call.region, name=record.name),
                     "HyperParameterTuningJobStatus": d["HyperParameterTuningJobStatus"],
                     "Strategy": config["Strategy"], "CreationTime": d["CreationTime"],
                     "HyperParameterTuningEndTime": d.get("HyperParameterTuningEndTime"),
                     "LastModifiedTime": d["LastModifiedTime"],
                     "TrainingJobStatusCounters": d["TrainingJobStatusCounters"],
                     "ObjectiveStatusCounters": d["ObjectiveStatusCounters"],
                     "ResourceLimits": config["ResourceLimits"]})
    key = {"Name": lambda r: r["HyperParameterTuningJobName"],
           "Status": lambda r: r["HyperParameterTuningJobStatus"]}.get(request.get("SortBy"),
                                                                     lambda r: r["CreationTime"])
    rows.sort(key=key, reverse=request.get("SortOrder", "Descending") == "Descending")
    start, size = training._page(request)
    more = start + size < len(rows)
    return {"HyperParameterTuningJobSummaries": rows[start:start + size],
            **({"NextToken": str(start + size)} if more else {})}


def stop_hyper_parameter_tuning_job(call: Call, request: dict) -> dict:
    from shipyard.tuning.lifecycle import stop

    name = request["HyperParameterTuningJobName"]
    _known(call, name)
    if not stop(_tuning(call), name):
        raise AwsError("ValidationException", f"The tuning job {name} is in status "
                                              f"{_tuning(call).get(name).status} and cannot be stopped")
    return {}


def list_training_jobs_for_hyper_parameter_tuning_job(call: Call, request: dict) -> dict:
    from shipyard.tuning.describe import summaries

    name = request["HyperParameterTuningJobName"]
    _known(call, name)
    jobs = summaries(call.store, name)
    if request.get("StatusEquals"):
        jobs = [j for j in jobs if j["TrainingJobStatus"] == request["StatusEquals"]]
    if request.get("SortBy") == "FinalObjectiveMetricValue":
        jobs.sort(key=lambda j: (j.get("FinalHyperParameterTuningJobObjectiveMetric") or {}).get("Value", float("nan")),
                  reverse=request.get("SortOrder", "Descending") == "Descending")
    elif request.get("SortBy") in ("Name", "Status"):
        field = "TrainingJobName" if request["SortBy"] == "Name" else "TrainingJobStatus"
        jobs.sort(key=lambda j: j[field], reverse=request.get("SortOrder", "Descending") == "Descending")
    else:
        jobs.sort(key=lambda j: j["CreationTime"], reverse=request.get("SortOrder", "Descending") == "Descending")
    for job in jobs:
        job["TrainingJobArn"] = training.arn(call, job["TrainingJobName"])
        job["TuningJobName"] = name
    start, size = training._page(request)
    more = start + size < len(jobs)
    return {"TrainingJobSummaries": jobs[start:start + size], **({"NextToken": str(start + size)} if more else {})}


OPERATIONS = {
    "CreateHyperParameterTuningJob": create_hyper_parameter_tuning_job,
    "DescribeHyperParameterTuningJob": describe_hyper_parameter_tuning_job,
    "ListHyperParameterTuningJobs": list_hyper_parameter_tuning_jobs,
    "StopHyperParameterTuningJob": stop_hyper_parameter_tuning_job,
    "ListTrainingJobsForHyperParameterTuningJob": list_training_jobs_for_hyper_parameter_tuning_job,
}
