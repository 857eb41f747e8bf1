"""A job argument is declared once, as a field of the job spec: the Estimator takes it, puts it in the
job, a job file may carry it, and attach() gives it back. VALUES holds a value for every such field, so
a new field fails here until it has one, and then is checked on every path."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter

from shipyard import Estimator
from shipyard.cli.jobfile import JobFile
from shipyard.errors import ValidationError
from shipyard.profiler import ProfilerConfig
from shipyard.sdk.arguments import HONOURED, SPEC_ARGUMENTS, default
from shipyard.spec.job import JobSpec
from shipyard.store import Store

VALUES = {
    "instance_count": 3, "instance_type": "ml.m5.large", "output_path": "file:///tmp/out",
    "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}], "environment": {"A": "1"},
    "max_run": 100, "stop_grace_seconds": 3.0, "oversubscribe": True, "framework_version": "2.1",
    "py_version": "py311", "backend": "local", "controller": "local", "tags": [{"Key": "team", "Value": "ml"}],
    "use_spot_instances": True, "max_wait": 200, "checkpoint_s3_uri": "file:///tmp/ckpt",
    "checkpoint_local_path": "/opt/ml/ck", "max_retry_attempts": 2, "interruption_notice_seconds": 4.0,
    "spot_simulation": {"interruptions_at": (5.0,), "seed": 1}, "spot_without_checkpoints": True,
    "hang_timeout_seconds": 7.0, "rules": [], "debugger_hook_config": None, "keep_alive_period_in_seconds": 0,
    "profiler_config": ProfilerConfig(system_monitor_interval_millis=1000), "input_mode": "FastFile",
    "instance_groups": [],   # instead of instance_type and instance_count: test_instance_groups_come_back
    "enable_sagemaker_metrics": False, "role": "arn:aws:iam::111122223333:role/trainer", "volume_size": 100,
    "subnets": ["subnet-1"], "security_group_ids": ["sg-1"], "max_cost": 12.5,
    "tensorboard_output_config": {"s3_output_path": "file:///tmp/tb", "container_local_output_path": "/opt/ml/tb"},
    "image_uri": "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1",
}


def _as_spec(name: str, value):
    return TypeAdapter(JobSpec.model_fields[name].annotation).validate_python(value)


def test_every_spec_field_reaches_the_job_and_comes_back_from_attach(tmp_path, monkeypatch):
    monkeypatch.setenv("SHIPYARD_HOME", str(tmp_path / "home"))
    assert set(VALUES) == set(SPEC_ARGUMENTS), "give the new field a value here"
    assert set(SPEC_ARGUMENTS) <= set(JobFile.model_fields)  # a job.yaml key of the same name
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('hi')\n")
    store = Store()
    spec = Estimator(entry_point="train.py", source_dir=str(source), **VALUES)._spec(None, "round-trip", store)
    for name, value in VALUES.items():
        assert getattr(spec, name) == _as_spec(name, value), name
    store.create_job(spec)
    attached = Estimator.attach("round-trip", wait=False)
    for name in SPEC_ARGUMENTS:
        assert _as_spec(name, getattr(attached, name)) == getattr(spec, name), name
    assert attached.hyperparameters() == {} and attached.base_job_name == "round-trip"


def test_instance_groups_come_back_from_attach(tmp_path, monkeypatch):
    from shipyard.instance_group import InstanceGroup

    monkeypatch.setenv("SHIPYARD_HOME", str(tmp_path / "home"))
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('hi')\n")
    groups = [InstanceGroup("data", "local", 1), InstanceGroup("train", "local", 2)]
    estimator = Estimator(entry_point="train.py", source_dir=str(source), instance_groups=groups,
                          distribution={"torch_distributed": {"enabled": True}, "instance_groups": [groups[1]]})
    store = Store()
    spec = estimator._spec(None, "hetero", store)
    assert [(g.instance_group_name, g.instance_count) for g in spec.instance_groups] == [("data", 1), ("train", 2)]
    assert (spec.instance_count, spec.distribution_groups) == (3, ["train"])
    store.create_job(spec)
    attached = Estimator.attach("hetero", wait=False)
    assert attached.instance_groups == spec.instance_groups and attached.instance_count == 3
    assert attached.distribution == {"torch_distributed": {"enabled": True}, "instance_groups": ["train"]}


def test_defaults_are_the_spec_s(tmp_path, monkeypatch):
    monkeypatch.setenv("SHIPYARD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SHIPYARD_BACKEND", "ray")
    estimator = Estimator(entry_point="train.py")
    assert estimator.hang_timeout_seconds == JobSpec.model_fields["hang_timeout_seconds"].default == 300.0
    assert estimator.max_run == 86400 and estimator.instance_count == 1
    assert estimator.backend == default("backend") == "ray"  # the setting, read when the estimator is made


def test_only_sdk_arguments_and_spec_fields_are_honoured():
    assert HONOURED == set(SPEC_ARGUMENTS) | {
        "entry_point", "source_dir", "dependencies", "hyperparameters", "input_mode", "base_job_name",
        "code_location", "container_log_level", "disable_profiler", "distribution",
        "follow_symlinks"}
    with pytest.raises(ValidationError, match="did you mean 'job_name'|unknown"):
        Estimator(entry_point="train.py", job_name="x")  # fit()'s, not the estimator's
