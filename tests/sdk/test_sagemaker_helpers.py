"""Issue 22: SageMaker's helpers on a job, written as SageMaker's documentation writes the calls:
`TrainingJobAnalytics(...).dataframe()`, `estimator.training_job_analytics`, the artifacts paths, and the
fields of DescribeTrainingJob that say how the debugger and profiler were configured. The job is made in
the store as its controller would leave it (no job runs)."""

from __future__ import annotations

import datetime as dt

import pytest

from shipyard.analytics import TrainingJobAnalytics
from shipyard.debugger import CollectionConfig, DebuggerHookConfig, Rule, rule_configs
from shipyard.errors import ValidationError
from shipyard.profiler import ProfilerConfig, ProfilerRule
from shipyard.profiler import rule_configs as profiler_rules
from shipyard.pytorch import PyTorch
from shipyard.sdk.job import TrainingJob
from shipyard.store import Store

T0 = 1_795_000_000.0


def _estimator(script, **kwargs) -> PyTorch:
    return PyTorch(entry_point="train.py", source_dir=str(script), output_path="file:///tmp/out",
                   metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"},
                                       {"Name": "accuracy", "Regex": "acc=([0-9.]+)"}], **kwargs)


def _ran(estimator, name: str) -> TrainingJob:
    """The job `estimator` would submit, recorded as having trained from T0 with these metric lines."""
    store = Store()
    store.create_job(estimator._spec(None, name, store))
    store.update_job(name, training_start_time=T0)
    store.add_metrics(name, [("loss", "algo-1", T0 + 10, 0.9), ("loss", "algo-1", T0 + 70, 0.5),
                             ("loss", "algo-1", T0 + 80, 0.3), ("accuracy", "algo-1", T0 + 80, 0.7),
                             ("loss", "algo-2", T0 + 10, 5.0)])
    estimator.latest_training_job = TrainingJob(name)
    return estimator.latest_training_job


def test_training_job_analytics_dataframe(home, script):
    estimator = _estimator(script)
    job = _ran(estimator, "analysed")
    metrics_dataframe = TrainingJobAnalytics(training_job_name=job.name, metric_names=["loss"]).dataframe()
    assert list(metrics_dataframe.columns) == ["timestamp", "metric_name", "value"]
    # algo-1's values (SageMaker's Host dimension), seconds since the job started training
    assert metrics_dataframe.values.tolist() == [[10.0, "loss", 0.9], [70.0, "loss", 0.5], [80.0, "loss", 0.3]]
    every = estimator.training_job_analytics.dataframe()
    assert every["metric_name"].tolist() == ["loss", "loss", "loss", "accuracy"]
    per_minute = TrainingJobAnalytics(job.name, ["loss"], period=60).dataframe()
    assert per_minute.values.tolist() == [[0.0, "loss", 0.9], [60.0, "loss", 0.4]]
    late = TrainingJobAnalytics(job.name, ["loss"], start_time=dt.datetime.fromtimestamp(T0 + 60, dt.timezone.utc))
    assert late.dataframe()["value"].tolist() == [0.5, 0.3]


def test_analytics_refuses_what_the_job_does_not_have(home, script):
    job = _ran(_estimator(script), "analysed-2")
    with pytest.raises(ValidationError, match="metric_names='los': unknown name; did you mean 'loss'"):
        TrainingJobAnalytics(job.name, metric_names=["los"])
    with pytest.raises(ValidationError, match="period=0"):
        TrainingJobAnalytics(job.name, period=0)
    with pytest.raises(ValidationError, match="no job has run yet"):
        _estimator(script).training_job_analytics


def test_artifacts_paths_and_the_configurations_describe_shows(home, script):
    estimator = _estimator(
        script,
        debugger_hook_config=DebuggerHookConfig(s3_output_path="file:///tmp/tensors", hook_parameters={
            "save_interval": "5"}, collection_configs=[CollectionConfig(name="losses")]),
        rules=[Rule.sagemaker(rule_configs.vanishing_gradient(), rule_parameters={"threshold": "0.001"}),
               ProfilerRule.sagemaker(profiler_rules.ProfilerReport())],
        profiler_config=ProfilerConfig(system_monitor_interval_millis=500))
    assert estimator.latest_job_debugger_artifacts_path() is None   # no job yet, as SageMaker's
    job = _ran(estimator, "configured")
    assert estimator.latest_job_debugger_artifacts_path() == "file:///tmp/tensors/configured/debug-output"
    assert estimator.latest_job_profiler_artifacts_path() == "file:///tmp/out/configured/profiler-output"
    description = job.describe()
    hook = description["DebugHookConfig"]
    assert hook["S3OutputPath"] == "file:///tmp/tensors" and hook["LocalPath"] == "/opt/ml/output/tensors"
    assert hook["HookParameters"] == {"save_interval": "5"}
    assert {"CollectionName": "losses", "CollectionParameters": {}} in hook["CollectionConfigurations"]
    (debugger,) = description["DebugRuleConfigurations"]
    assert debugger["RuleConfigurationName"] == "VanishingGradient"
    assert debugger["RuleParameters"] == {"rule_to_invoke": "VanishingGradient", "threshold": "0.001"}
    assert debugger["S3OutputPath"] == "file:///tmp/out/configured/rule-output"
    (profiler,) = description["ProfilerRuleConfigurations"]
    assert profiler["RuleParameters"]["rule_to_invoke"] == "ProfilerReport"
    assert description["ProfilerConfig"]["ProfilingIntervalInMilliseconds"] == 500


def test_without_hook_or_profiling_the_paths_are_none(home, script):
    estimator = _estimator(script, debugger_hook_config=False, disable_profiler=True)
    job = _ran(estimator, "plain")
    assert estimator.latest_job_debugger_artifacts_path() is None
    assert estimator.latest_job_profiler_artifacts_path() is None
    description = job.describe()
    assert "DebugHookConfig" not in description and "DebugRuleConfigurations" not in description
    assert description["AlgorithmSpecification"]["EnableSageMakerMetricsTimeSeries"] is True
    assert "RoleArn" not in description and "VpcConfig" not in description
    assert description["ResourceConfig"]["VolumeSizeInGB"] == 30
    off = _estimator(script, enable_sagemaker_metrics=False, role="arn:aws:iam::111122223333:role/trainer",
                     volume_size=100, subnets=["subnet-1"], security_group_ids=["sg-1"])
    described = _ran(off, "off").describe()
    assert described["AlgorithmSpecification"]["EnableSageMakerMetricsTimeSeries"] is False
    assert described["RoleArn"] == "arn:aws:iam::111122223333:role/trainer"
    assert described["VpcConfig"] == {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-1"]}
    assert described["ResourceConfig"]["VolumeSizeInGB"] == 100


# SageMaker's own positional order (sagemaker 2.232.0, sagemaker/debugger/*.py), as facts: shipyard's
# classes of the same names take their positional arguments in it, and the rest by name.
SAGEMAKER_POSITIONAL = {
    "CollectionConfig": ("name", "parameters"),
    "DebuggerHookConfig": ("s3_output_path", "container_local_output_path", "hook_parameters", "collection_configs"),
    "TensorBoardOutputConfig": ("s3_output_path", "container_local_output_path"),
    # then profile_params (SageMaker's Profiler v2), not built here
    "ProfilerConfig": ("s3_output_path", "system_monitor_interval_millis", "framework_profile_params"),
    "DetailedProfilingConfig": ("start_step", "num_steps", "start_unix_time", "duration", "profile_default_steps"),
    "DataloaderProfilingConfig": ("start_step", "num_steps", "start_unix_time", "duration", "profile_default_steps",
                                  "metrics_regex"),
    "PythonProfilingConfig": ("start_step", "num_steps", "start_unix_time", "duration", "profile_default_steps",
                              "python_profiler", "cprofile_timer"),
}


def test_sdk_classes_take_sagemaker_s_positional_arguments():
    import shipyard.debugger
    import shipyard.profiler

    for name, order in SAGEMAKER_POSITIONAL.items():
        cls = getattr(shipyard.debugger, name, None) or getattr(shipyard.profiler, name)
        assert cls.POSITIONAL == order, name
    # as SageMaker's examples write them
    hook = DebuggerHookConfig("s3://bucket/debug", collection_configs=[CollectionConfig("losses", {"save_interval": "5"})])
    assert hook.collection_configs[0].parameters == {"save_interval": "5"}
    from shipyard.profiler import DetailedProfilingConfig, PythonProfilingConfig

    assert ProfilerConfig("s3://bucket/prof", 100).system_monitor_interval_millis == 100
    assert DetailedProfilingConfig(5, 2).num_steps == 2
    assert PythonProfilingConfig(9, 3, None, None, False, "pyinstrument").python_profiler == "pyinstrument"
    with pytest.raises(TypeError, match=r"ProfilerConfig\(\) takes 3 positional arguments \(s3_output_path, "):
        ProfilerConfig("s3://b/p", 500, None, None)
    with pytest.raises(TypeError, match=r"CollectionConfig\(\) got 'name' both by position and by name"):
        CollectionConfig("losses", name="weights")
    with pytest.raises(ValidationError, match="system_monitor_interval_millis"):
        ProfilerConfig("s3://bucket/prof", 300)   # checked as if given by name
