"""Training jobs through SageMaker's API: a CreateTrainingJob request becomes the JobSpec it already is in
snake_case (spec/job.py) and is submitted as `fit()` submits; DescribeTrainingJob is control/describe.py's
description without shipyard's own fields. What a request asks that shipyard does not do is refused by its
API name, never dropped."""

from __future__ import annotations

import datetime
from typing import Any

from shipyard.server.aws.protocol import ACCOUNT, AwsError, Call
from shipyard.spec.job import JobSpec

ARN = "arn:aws:sagemaker:{region}:" + ACCOUNT + ":training-job/{name}"
# DescribeTrainingJob members shipyard keeps beside SageMaker's (its own fields, the tags ListTags returns).
NOT_SAGEMAKERS = ("Shipyard", "Tags")
MAX_RESULTS = 100
# Members of a training request shipyard does not do, refused by name when given (a False flag is not given).
NOT_BUILT = ("RemoteDebugConfig", "InfraCheckConfig", "SessionChainingConfig", "ModelPackageConfig",
             "ServerlessJobConfig", "MlflowConfig", "ExperimentConfig", "EnableNetworkIsolation",
             "EnableInterContainerTrafficEncryption")
NOT_BUILT_IMAGE = ("ContainerEntrypoint", "ContainerArguments", "TrainingImageConfig")


def arn(call: Call, name: str) -> str:
    return ARN.format(region=call.region, name=name)


# -- CreateTrainingJob -> JobSpec ----------------------------------------------------------------------
def job_fields(request: dict, name: str) -> dict[str, Any]:
    """The JobSpec fields a training job definition gives (CreateTrainingJob's, and a tuning job's
    TrainingJobDefinition, whose resources may be HyperParameterTuningResourceConfig)."""
    from shipyard.spec.images import runs

    _refuse("AlgorithmSpecification.AlgorithmName", request["AlgorithmSpecification"].get("AlgorithmName"),
            "algorithm resources are not kept here; give the TrainingImage (image_uris.retrieve)")
    for member in NOT_BUILT:
        _refuse(member, request.get(member), "not built in shipyard; remove it")
    for member in NOT_BUILT_IMAGE:
        _refuse(f"AlgorithmSpecification.{member}", request["AlgorithmSpecification"].get(member),
                "shipyard runs what the image is known to hold, not the image itself; remove it")
    _refuse("OutputDataConfig.KmsKeyId", request["OutputDataConfig"].get("KmsKeyId"),
            "artifacts are not encrypted with KMS keys here; remove it (protect the S3 store instead)")
    algorithm = request["AlgorithmSpecification"]
    image_uri = algorithm.get("TrainingImage")
    if not image_uri:
        raise AwsError("ValidationException", "AlgorithmSpecification.TrainingImage is required: shipyard runs "
                                              "what the image is known to hold (image_uris.retrieve gives one)")
    image, tag = runs(image_uri)
    hyperparameters = dict(request.get("HyperParameters") or request.get("StaticHyperParameters") or {})
    fields: dict[str, Any] = {"job_name": name, "image_uri": image_uri, "hyperparameters": hyperparameters}
    if image.kind == "algorithm" and "sagemaker_program" not in hyperparameters:
        fields["algorithm"] = image.algorithm
    else:
        fields.update(framework=image.framework, framework_version=tag["framework_version"],
                      py_version=tag["py_version"])
    mode = algorithm.get("TrainingInputMode", "File")
    resources = request.get("ResourceConfig") or request.get("HyperParameterTuningResourceConfig") or {}
    fields.update(_resources(resources))
    stopping = request.get("StoppingCondition") or {}
    checkpoint = request.get("CheckpointConfig") or {}
    vpc = request.get("VpcConfig") or {}
    spot = bool(request.get("EnableManagedSpotTraining"))
    fields.update(
        channels=[_channel(c, mode) for c in request.get("InputDataConfig") or ()], input_mode=mode,
        output_path=request["OutputDataConfig"]["S3OutputPath"],
        metric_definitions=algorithm.get("MetricDefinitions") or (),
        enable_sagemaker_metrics=algorithm.get("EnableSageMakerMetricsTimeSeries"),
        environment=request.get("Environment") or {},
        max_run=stopping.get("MaxRuntimeInSeconds", 86400), max_wait=stopping.get("MaxWaitTimeInSeconds"),
        use_spot_instances=spot, spot_without_checkpoints=spot and not checkpoint,   # SageMaker allows it
        checkpoint_s3_uri=checkpoint.get("S3Uri"), role=request.get("RoleArn"),
        max_retry_attempts=(request.get("RetryStrategy") or {}).get("MaximumRetryAttempts", 0),
        tags=[{"Key": t["Key"], "Value": t.get("Value", "")} for t in request.get("Tags") or ()],
        subnets=vpc.get("Subnets", ()), security_group_ids=vpc.get("SecurityGroupIds", ()),
        rules=_rules(request), debugger_hook_config=_hook(request.get("DebugHookConfig")),
        profiler_config=_profiler(request.get("ProfilerConfig"), name),
        tensorboard_output_config=_tensorboard(request.get("TensorBoardOutputConfig")))
    if checkpoint.get("LocalPath"):
        fields["checkpoint_local_path"] = checkpoint["LocalPath"]
    return {key: value for key, value in fields.items() if value is not None}


def _refuse(member: str, value: Any, fix: str) -> None:
    if value:
        raise AwsError("ValidationException", f"{member}: {fix}")


def _resources(config: dict) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if config.get("InstanceGroups"):
        fields["instance_groups"] = [{"instance_group_name": g["InstanceGroupName"], "instance_type": g["InstanceType"],
                                      "instance_count": g["InstanceCount"]} for g in config["InstanceGroups"]]
    else:
        fields.update(instance_type=config.get("InstanceType"), instance_count=config.get("InstanceCount"))
    if config.get("VolumeSizeInGB"):
        fields["volume_size"] = config["VolumeSizeInGB"]
    if config.get("KeepAlivePeriodInSeconds"):
        fields["keep_alive_period_in_seconds"] = config["KeepAlivePeriodInSeconds"]
    return fields


def _channel(channel: dict, job_mode: str) -> dict[str, Any]:
    source = channel["DataSource"]
    fields: dict[str, Any] = {"name": channel["ChannelName"], "input_mode": channel.get("InputMode", job_mode),
                              "content_type": channel.get("ContentType")}
    if channel.get("CompressionType") not in (None, "None"):
        fields["compression"] = channel["CompressionType"]
    if channel.get("RecordWrapperType") not in (None, "None"):
        fields["record_wrapping"] = channel["RecordWrapperType"]
    if channel.get("ShuffleConfig"):
        fields["shuffle_seed"] = channel["ShuffleConfig"]["Seed"]
    if "FileSystemDataSource" in source:
        fs = source["FileSystemDataSource"]
        fields.update(uri=fs["DirectoryPath"], file_system_type=fs["FileSystemType"], file_system_id=fs["FileSystemId"])
    elif "S3DataSource" in source:
        s3 = source["S3DataSource"]
        fields.update(uri=s3["S3Uri"], s3_data_type=s3.get("S3DataType", "S3Prefix"),
                      distribution=s3.get("S3DataDistributionType", "FullyReplicated"),
                      attribute_names=s3.get("AttributeNames", ()), instance_groups=s3.get("InstanceGroupNames", ()))
    else:
        raise AwsError("ValidationException", f"channel {channel['ChannelName']}: DataSource must be an "
                                              "S3DataSource or a FileSystemDataSource here")
    return {key: value for key, value in fields.items() if value is not None}


def _rules(request: dict) -> list[dict]:
    """Debug/ProfilerRuleConfigurations: SageMaker's built-in rules by their rule_to_invoke, evaluated beside
    the job (a rule image of one's own has nothing here to run it)."""
    rules = []
    for kind, member in (("debugger", "DebugRuleConfigurations"), ("profiler", "ProfilerRuleConfigurations")):
        for config in request.get(member) or ():
            parameters = dict(config.get("RuleParameters") or {})
            rule = parameters.pop("rule_to_invoke", None)
            if rule is None:
                raise AwsError("ValidationException", f"{member}[{config['RuleConfigurationName']}]: RuleParameters "
                                                      "needs rule_to_invoke, the built-in rule to evaluate")
            rules.append({"kind": kind, "name": config["RuleConfigurationName"], "rule": rule,
                          "parameters": parameters})
    return rules


def _hook(config: dict | None) -> dict | None:
    if config is None:
        return None
    return {"s3_output_path": config.get("S3OutputPath"), "hook_parameters": config.get("HookParameters") or {},
            **({"container_local_output_path": config["LocalPath"]} if config.get("LocalPath") else {}),
            "collection_configs": [{"name": c["CollectionName"], "parameters": c.get("CollectionParameters") or {}}
                                   for c in config.get("CollectionConfigurations") or ()]}


def _profiler(config: dict | None, name: str) -> dict | None:
    """ProfilerConfig: SageMaker keeps a job's profiler data under S3OutputPath/<job>/profiler-output."""
    from shipyard.storage.uri import join

    if config is None:
        return None
    _refuse("ProfilerConfig.ProfilingParameters", config.get("ProfilingParameters"),
            "framework profiling is configured through shipyard's SDK (FrameworkProfile), not built for this API yet")
    return {"s3_output_path": join(config["S3OutputPath"], name, "profiler-output") if config.get("S3OutputPath")
            else None, "system_monitor_interval_millis": config.get("ProfilingIntervalInMilliseconds"),
            "disable_profiler": bool(config.get("DisableProfiler"))}


def _tensorboard(config: dict | None) -> dict | None:
    if config is None:
        return None
    return {"s3_output_path": config["S3OutputPath"],
            **({"container_local_output_path": config["LocalPath"]} if config.get("LocalPath") else {})}


def spec_of(fields: dict[str, Any]) -> JobSpec:
    from shipyard.spec.build import build

    return build(JobSpec, "", **fields)


# -- operations ------------------------------------------------------------------------------------
def create_training_job(call: Call, request: dict) -> dict:
    from shipyard.control.submit import submit
    from shipyard.errors import CapacityError

    name = request["TrainingJobName"]
    if call.store.exists(name):
        raise AwsError("ResourceInUse", f"Training job names must be unique within an AWS account and region, and "
                                        f"a training job with this name already exists ({arn(call, name)})")
    spec = spec_of(job_fields(request, name))
    try:
        submit(call.store, spec)   # the SDK uploaded the code to sagemaker_submit_directory already
    except CapacityError as exc:   # what AWS answers for instances an account cannot have
        raise AwsError("ResourceLimitExceeded", str(exc)) from None
    return {"TrainingJobArn": arn(call, name)}


def _record(call: Call, name: str):
    from shipyard.control.reconcile import reconcile

    if not call.store.exists(name):
        raise AwsError("ValidationException", "Requested resource not found.")   # what SageMaker answers
    return reconcile(call.store, name)


def describe_training_job(call: Call, request: dict) -> dict:
    from shipyard.control.describe import describe_record

    description = describe_record(call.store, _record(call, request["TrainingJobName"]))
    for key in NOT_SAGEMAKERS:
        description.pop(key, None)
    description["TrainingJobArn"] = arn(call, description["TrainingJobName"])
    return description


def list_training_jobs(call: Call, request: dict) -> dict:
    from shipyard.control.billing import prices
    from shipyard.control.describe import billed
    from shipyard.control.reconcile import reconcile
    from shipyard.spec.statuses import status_named

    status = request.get("StatusEquals")
    if status is not None and status_named(status) is None:
        raise AwsError("ValidationException", f"Value '{status}' at 'statusEquals' failed to satisfy constraint")
    records = call.store.list_jobs(status=status, name_contains=request.get("NameContains"))
    records = [r for r in records if _in_window(r, request)]
    key = {"Name": lambda r: r.name, "Status": lambda r: r.status}.get(request.get("SortBy"),
                                                                        lambda r: r.creation_time)
    records.sort(key=key, reverse=request.get("SortOrder", "Descending") == "Descending")
    priced = prices()

    def summary(record) -> dict:
        record = record if record.terminal else reconcile(call.store, record.name)   # a controller may have died
        row = {"TrainingJobName": record.name, "TrainingJobArn": arn(call, record.name),
               "CreationTime": _time(record.creation_time), "TrainingEndTime": _time(record.training_end_time),
               "LastModifiedTime": _time(record.last_modified_time), "TrainingJobStatus": record.status,
               "SecondaryStatus": record.secondary_status}
        _, pool = billed(call.store, record, call.store.attempts(record.name), priced)
        return {**row, "WarmPoolStatus": pool["status"]} if pool else row

    start, size = _page(request)
    wanted = request.get("WarmPoolStatusEquals")
    if wanted:   # every job's pool is read then; otherwise only the page's
        rows = [row for row in map(summary, records) if row.get("WarmPoolStatus", {}).get("Status") == wanted]
        total, page = len(rows), rows[start:start + size]
    else:
        total, page = len(records), [summary(record) for record in records[start:start + size]]
    more = start + size < total
    return {"TrainingJobSummaries": page, **({"NextToken": str(start + size)} if more else {})}


def _in_window(record, request: dict) -> bool:
    """Within CreationTimeAfter/Before and LastModifiedTimeAfter/Before, those given (bounds excluded)."""
    for member, value, later in (("CreationTimeAfter", record.creation_time, True),
                                 ("CreationTimeBefore", record.creation_time, False),
                                 ("LastModifiedTimeAfter", record.last_modified_time, True),
                                 ("LastModifiedTimeBefore", record.last_modified_time, False)):
        bound = request.get(member)
        if bound is not None and not (value > bound.timestamp() if later else value < bound.timestamp()):
            return False
    return True


def _page(request: dict) -> tuple[int, int]:
    token = request.get("NextToken") or "0"
    if not token.isdigit():
        raise AwsError("ValidationException", f"NextToken {token!r} is not one this API returned")
    return int(token), min(int(request.get("MaxResults") or MAX_RESULTS), MAX_RESULTS)


def _time(ts: float | None) -> datetime.datetime | None:
    return None if ts is None else datetime.datetime.fromtimestamp(ts, datetime.timezone.utc)


def stop_training_job(call: Call, request: dict) -> dict:
    from shipyard.control.reconcile import stop
    from shipyard.errors import ConflictError

    name = request["TrainingJobName"]
    record = _record(call, name)
    try:
        stop(call.store, name)
    except ConflictError:
        raise AwsError("ValidationException", f"The request was rejected because the training job is in status "
                                              f"{record.status}.") from None
    return {}


def update_training_job(call: Call, request: dict) -> dict:
    """A warm pool's KeepAlivePeriodInSeconds, and profiling (DisableProfiler, the interval, new profiler
    rules), as the SDK's update_training_job sends them."""
    from shipyard.control import profiling
    from shipyard.errors import ConflictError, NotFoundError
    from shipyard.sdk.job import TrainingJob

    name = request["TrainingJobName"]
    _record(call, name)
    _refuse("RemoteDebugConfig", request.get("RemoteDebugConfig"), "not built in shipyard; remove it")
    keep_alive = (request.get("ResourceConfig") or {}).get("KeepAlivePeriodInSeconds")
    if keep_alive is not None:
        try:
            TrainingJob(name, call.store).update(keep_alive)
        except (NotFoundError, ConflictError) as exc:   # the job is there; its pool is not (any more)
            raise AwsError("ValidationException", str(exc)) from None
    config = request.get("ProfilerConfig") or {}
    rules = _rules(request)
    if config.get("DisableProfiler"):
        profiling.disable(call.store, name)
    elif config or rules:
        from shipyard.spec.rules import RuleConfig

        profiling.update(call.store, name, rules=[RuleConfig(**r) for r in rules],
                         system_monitor_interval_millis=config.get("ProfilingIntervalInMilliseconds"))
    return {"TrainingJobArn": arn(call, name)}


# -- tags ------------------------------------------------------------------------------------------
def _tagged(call: Call, resource_arn: str) -> str:
    """The training job an ARN names (tags are kept with training jobs)."""
    prefix = arn(call, "")
    name = resource_arn.rsplit(":training-job/", 1)[-1] if ":training-job/" in resource_arn else None
    if name is None or not call.store.exists(name):
        raise AwsError("ResourceNotFound", f"{resource_arn} is not a training job here (tags are kept for training "
                                           f"jobs: {prefix}<name>)")
    return name


def add_tags(call: Call, request: dict) -> dict:
    name = _tagged(call, request["ResourceArn"])
    tags = {t["Key"]: t.get("Value", "") for t in call.store.get_job(name).spec.tags}
    tags.update({t["Key"]: t.get("Value", "") for t in request["Tags"]})
    if len(tags) > 50:
        raise AwsError("ResourceLimitExceeded", f"{len(tags)} tags; a resource may have at most 50")
    call.store.update_tags(name, [{"Key": k, "Value": v} for k, v in tags.items()])
    return {"Tags": request["Tags"]}


def list_tags(call: Call, request: dict) -> dict:
    tags = [dict(t) for t in call.store.get_job(_tagged(call, request["ResourceArn"])).spec.tags]
    start, size = _page(request)
    return {"Tags": tags[start:start + size], **({"NextToken": str(start + size)} if start + size < len(tags) else {})}


def delete_tags(call: Call, request: dict) -> dict:
    name = _tagged(call, request["ResourceArn"])
    gone = set(request["TagKeys"])
    call.store.update_tags(name, [t for t in call.store.get_job(name).spec.tags if t["Key"] not in gone])
    return {}


OPERATIONS = {
    "CreateTrainingJob": create_training_job,
    "DescribeTrainingJob": describe_training_job,
    "ListTrainingJobs": list_training_jobs,
    "StopTrainingJob": stop_training_job,
    "UpdateTrainingJob": update_training_job,
    "AddTags": add_tags,
    "ListTags": list_tags,
    "DeleteTags": delete_tags,
}
