"""A job as DescribeTrainingJob returns it (same field names and places), built from the store's record;
shipyard's own fields are under `Shipyard`, and `Tags` (SageMaker's ListTags) beside them."""

from __future__ import annotations

import datetime as dt
import time

from shipyard.control.reconcile import reconcile
from shipyard.store import JobRecord, Store

ARN_PREFIX = "arn:shipyard:sagemaker:local:000000000000:training-job/"
# shipyard's own fields, kept apart from SageMaker's (tests/control/test_describe_shape.py holds the rest
# to botocore's DescribeTrainingJob): what the job cost, its attempts, its warnings, the output.tar.gz.
OWN = "Shipyard"
OWN_BILLING = ("Cost", "ManagedSpotTrainingSavings")   # of billing()'s figures; the rest are SageMaker's


def _time(ts: float | None) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc) if ts is not None else None


def final_metrics(store: Store, name: str) -> list[dict]:
    """The last value of each metric, with its timestamp (at most 40 entries, as SageMaker keeps)."""
    last: dict[str, dict] = {}
    for point in store.metrics(name):
        last[point["name"]] = point
    return [
        {"MetricName": metric, "Value": point["value"], "Timestamp": _time(point["ts"])}
        for metric, point in list(last.items())[:40]
    ]


def describe(store: Store, name: str) -> dict:
    record = reconcile(store, name)
    return describe_record(store, record)


def describe_record(store: Store, record: JobRecord) -> dict:
    from shipyard.control.billing import prices

    spec = record.spec
    end = record.training_end_time
    attempts = store.attempts(spec.job_name)
    costs, pool = billed(store, record, attempts, prices())
    own = {key: costs.pop(key) for key in OWN_BILLING if key in costs}
    own["Attempts"] = [
        {"AttemptNumber": a["number"], "StartTime": _time(a["start_time"]), "EndTime": _time(a["end_time"]),
         "Outcome": a["outcome"], "Reason": a["reason"], "RestoredCheckpoint": a["restored_checkpoint"]}
        for a in attempts
    ]
    description = {
        "TrainingJobName": spec.job_name,
        "TrainingJobArn": ARN_PREFIX + spec.job_name,
        "ModelArtifacts": {"S3ModelArtifacts": record.model_artifacts or _expected_model(spec)},
        "TrainingJobStatus": record.status,
        "SecondaryStatus": record.secondary_status,
        "HyperParameters": dict(spec.hyperparameters),
        **definition(spec),
        "CreationTime": _time(record.creation_time),
        "TrainingStartTime": _time(record.training_start_time),
        "TrainingEndTime": _time(end),
        "LastModifiedTime": _time(record.last_modified_time),
        "SecondaryStatusTransitions": [
            {"Status": t.status, "StartTime": _time(t.start_time), "EndTime": _time(t.end_time),
             "StatusMessage": t.message}
            for t in record.transitions
        ],
        "FinalMetricDataList": final_metrics(store, spec.job_name),
        **costs,
        "ProfilingStatus": "Enabled" if spec.profiler_config and spec.profiler_config.enabled else "Disabled",
    }
    if spec.tags:
        description["Tags"] = [dict(tag) for tag in spec.tags]
    if spec.keep_alive_period_in_seconds:
        # as updated since (UpdateTrainingJob); the job's own until it has a pool (or it ran unsandboxed)
        description["ResourceConfig"]["KeepAlivePeriodInSeconds"] = (pool or {}).get(
            "keep_alive", spec.keep_alive_period_in_seconds)
        if pool:
            description["WarmPoolStatus"] = pool["status"]
    if spec.profiler_config is not None:
        description["ProfilerConfig"] = spec.profiler_config.to_api(spec.output_path, spec.job_name)
    if spec.tensorboard_output_config is not None:
        description["TensorBoardOutputConfig"] = {
            "S3OutputPath": spec.tensorboard_output_config.s3_output_path,
            "LocalPath": spec.tensorboard_output_config.container_local_output_path}
    hook = spec.debugger_hook_config
    if hook is not None:
        description["DebugHookConfig"] = {
            "S3OutputPath": hook.s3_output_path or spec.output_path, "LocalPath": hook.container_local_output_path,
            "HookParameters": dict(hook.hook_parameters),
            "CollectionConfigurations": [{"CollectionName": c.name, "CollectionParameters": dict(c.parameters)}
                                         for c in hook.collection_configs]}
    for kind, field in (("debugger", "DebugRuleConfigurations"), ("profiler", "ProfilerRuleConfigurations")):
        rules = [r for r in spec.rules if r.kind == kind]
        if rules:
            description[field] = [_rule_configuration(spec, r) for r in rules]
    if record.failure_reason:
        description["FailureReason"] = record.failure_reason
    if record.output_artifacts:
        own["OutputArtifacts"] = {"S3OutputArtifacts": record.output_artifacts}
    for kind, field in (("debugger", "DebugRuleEvaluationStatuses"), ("profiler", "ProfilerRuleEvaluationStatuses")):
        statuses = store.rule_statuses(spec.job_name, kind)
        if statuses:
            description[field] = [
                {"RuleConfigurationName": s["rule"], "RuleEvaluationStatus": s["status"],
                 "StatusDetails": s["details"], "LastModifiedTime": _time(s["last_modified"])}
                for s in statuses
            ]
    warnings = [e["message"] for e in store.events(spec.job_name, "warning")]
    if warnings:
        own["Warnings"] = warnings
    description[OWN] = own
    return description


def definition(spec) -> dict:
    """What DescribeTrainingJob and a tuning job's training definition (HyperParameterTrainingJobDefinition)
    say alike of a job: its image and metrics, data, output, resources, limits, role and network."""
    out = {
        "AlgorithmSpecification": {
            "TrainingImage": spec.image_uri,
            "TrainingInputMode": spec.input_mode,
            "MetricDefinitions": [{"Name": m.name, "Regex": m.regex} for m in spec.all_metric_definitions],
            "EnableSageMakerMetricsTimeSeries": spec.enable_sagemaker_metrics is not False,
        },
        "InputDataConfig": [_channel(c) for c in spec.channels],
        # SageMaker answers KmsKeyId "" for an output without a key of its own (the SDK's attach reads it)
        "OutputDataConfig": {"KmsKeyId": "", "S3OutputPath": spec.output_path},
        "ResourceConfig": resource_config(spec),
        "StoppingCondition": {"MaxRuntimeInSeconds": spec.max_run,
                              **({"MaxWaitTimeInSeconds": spec.max_wait} if spec.max_wait else {})},
        "Environment": dict(spec.environment),
        "EnableNetworkIsolation": False,
        "EnableInterContainerTrafficEncryption": False,
        "EnableManagedSpotTraining": spec.use_spot_instances,
    }
    if spec.checkpoint_s3_uri:
        out["CheckpointConfig"] = {"S3Uri": spec.checkpoint_s3_uri, "LocalPath": spec.checkpoint_local_path}
    if spec.role:
        out["RoleArn"] = spec.role
    if spec.subnets or spec.security_group_ids:
        out["VpcConfig"] = {"SecurityGroupIds": list(spec.security_group_ids), "Subnets": list(spec.subnets)}
    if spec.max_retry_attempts:
        out["RetryStrategy"] = {"MaximumRetryAttempts": spec.max_retry_attempts}
    return out


def billed(store: Store, record: JobRecord, attempts: list[dict], priced) -> tuple[dict, dict | None]:
    """billing()'s figures for the job, with its warm pool's retained time added to Cost at the instances'
    price, as SageMaker bills it (ResourceRetainedBillableTimeInSeconds x InstanceCount); and its pool's
    keep-alive and WarmPoolStatus when it has one."""
    from shipyard.control.billing import billing
    from shipyard.control.pools import reconcile_pools
    from shipyard.store.pools import PoolStore

    spec = record.spec
    costs = billing(spec, record.training_start_time, record.training_end_time, attempts, priced)
    if not spec.keep_alive_period_in_seconds:
        return costs, None
    pools = PoolStore(store)
    reconcile_pools(store)
    use = pools.use(spec.job_name)
    if use is None:   # not started yet, or it ran without a sandbox (no warm pool there)
        return costs, None
    status = pools.warm_pool_status(spec.job_name)
    cost, instance_type = costs.get("Cost"), priced(spec.instance_type)
    if cost is not None and instance_type is not None:
        price = instance_type.on_demand_usd_per_hour
        retained = round(status["ResourceRetainedBillableTimeInSeconds"] * spec.instance_count * price / 3600, 6)
        cost["WarmPoolRetainedAmount"] = retained
        cost["Amount"] = round(cost["Amount"] + retained, 6)
    return costs, {"keep_alive": use["keep_alive"], "status": status}


def summary(store: Store, record: JobRecord, attempts: list[dict], priced) -> dict:
    """One row of a jobs table (the dashboard's, `shipyard jobs list`): what a person scans for. Its cost
    is describe()'s (`billed`), without the rest of describe(), so a page of rows stays quick."""
    spec = record.spec
    costs, _ = billed(store, record, attempts, priced)
    cost = costs.get("Cost", {})
    end = (record.training_end_time or record.last_modified_time) if record.terminal else time.time()
    return {
        "name": record.name,
        "status": record.status,
        "secondary_status": record.secondary_status,
        "creation_time": record.creation_time,
        "training_start_time": record.training_start_time,
        "training_end_time": record.training_end_time,
        "duration": max(0.0, end - record.creation_time),
        "instance_count": spec.instance_count,
        "instance_type": ", ".join(f"{len(g['hosts'])} x {g['instance_type']}" for g in spec.groups),
        "strategy": spec.strategy,
        "backend": spec.backend,
        "spot": spec.use_spot_instances,
        "cost": cost.get("Amount"),
        "on_demand_cost": cost.get("OnDemandAmount"),
        "spot_savings_percent": costs.get("ManagedSpotTrainingSavings"),
        "failure_reason": record.failure_reason,
    }


def summaries(store: Store, records: list[JobRecord]) -> list[dict]:
    """Rows for these jobs, priced together; a job whose controller died is reconciled first (it says
    InProgress until something does)."""
    from shipyard.control.billing import prices

    priced, attempts = prices(), store.attempts_of([r.name for r in records])
    return [summary(store, r if r.terminal else reconcile(store, r.name), attempts[r.name], priced) for r in records]


def _expected_model(spec) -> str:
    from shipyard.storage.uri import join

    return join(spec.output_path, spec.job_name, "output", "model.tar.gz")


def _rule_configuration(spec, rule) -> dict:
    """A rule as DescribeTrainingJob's Debug/ProfilerRuleConfigurations show it: what it evaluates
    (rule_to_invoke) and its parameters. It runs beside the job here, not on an instance of its own."""
    from shipyard.storage.uri import join

    return {"RuleConfigurationName": rule.name, "LocalPath": "/opt/ml/processing/output/rule",
            "S3OutputPath": join(spec.output_path, spec.job_name, "rule-output"), "RuleEvaluatorImage": None,
            "VolumeSizeInGB": 0,
            "RuleParameters": {"rule_to_invoke": rule.custom_class if rule.rule == "custom" else rule.rule,
                               **rule.parameters}}


def resource_config(spec) -> dict:
    """ResourceConfig: a heterogeneous job's InstanceGroups instead of InstanceType and InstanceCount."""
    if not spec.instance_groups:
        return {"InstanceType": spec.instance_type, "InstanceCount": spec.instance_count,
                "VolumeSizeInGB": spec.volume_size}
    return {"InstanceGroups": [{"InstanceGroupName": g.instance_group_name, "InstanceType": g.instance_type,
                                "InstanceCount": g.instance_count} for g in spec.instance_groups],
            "VolumeSizeInGB": spec.volume_size}


def _channel(c) -> dict:
    """A channel as DescribeTrainingJob's InputDataConfig shows it."""
    if c.file_system_type:
        source = {"FileSystemDataSource": {"FileSystemId": c.file_system_id, "FileSystemAccessMode": "ro",
                                           "FileSystemType": c.file_system_type, "DirectoryPath": c.uri}}
    else:
        source = {"S3DataSource": {
            "S3DataType": c.s3_data_type, "S3Uri": c.uri, "S3DataDistributionType": c.distribution,
            **({"AttributeNames": list(c.attribute_names)} if c.attribute_names else {}),
            **({"InstanceGroupNames": list(c.instance_groups)} if c.instance_groups else {})}}
    return {
        "ChannelName": c.name,
        "DataSource": source,
        **({"ContentType": c.content_type} if c.content_type else {}),
        "CompressionType": c.compression or "None",
        "RecordWrapperType": c.record_wrapping or "None",
        "InputMode": c.input_mode,
        **({"ShuffleConfig": {"Seed": c.shuffle_seed}} if c.shuffle_seed is not None else {}),
    }
