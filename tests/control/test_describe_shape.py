"""describe() in SageMaker's shape: walked against botocore's own model of DescribeTrainingJob's response
(the real package's), every key a job of every kind of configuration shows is one SageMaker has, at
the same place, except `Tags` (SageMaker's ListTags/Search give them; botocore's `TrainingJob` shape
has them beside the described fields) and shipyard's own fields, which are under `Shipyard`."""

from __future__ import annotations

import botocore.session
import pytest

from shipyard.control.describe import OWN, describe_record
from shipyard.debugger import (
    CollectionConfig,
    DebuggerHookConfig,
    Rule,
    TensorBoardOutputConfig,
)
from shipyard.inputs import FileSystemInput, ShuffleConfig, TrainingInput
from shipyard.instance_group import InstanceGroup
from shipyard.profiler import (
    FrameworkProfile,
    ProfilerConfig,
    ProfilerRule,
    rule_configs,
)
from shipyard.pytorch import PyTorch
from shipyard.store import Store


def _model():
    return botocore.session.get_session().get_service_model("sagemaker")


def _unknown(value, shape, path: str = "") -> list[str]:
    """The paths of keys in `value` that botocore's `shape` does not have."""
    if shape.type_name == "structure" and isinstance(value, dict):
        found = []
        for key, item in value.items():
            if key not in shape.members:
                found.append(f"{path}{key}")
            elif item is not None:
                found += _unknown(item, shape.members[key], f"{path}{key}.")
        return found
    if shape.type_name == "list" and isinstance(value, list):
        return [p for item in value for p in _unknown(item, shape.member, path)]
    if shape.type_name == "map" and isinstance(value, dict):
        return [p for item in value.values() for p in _unknown(item, shape.value, path)]
    return []


def _described(store, spec) -> dict:
    store.create_job(spec)
    store.update_job(spec.job_name, training_start_time=1000.0, training_end_time=1600.0,
                     output_artifacts="file:///out/job/output/output.tar.gz")
    number = store.start_attempt(spec.job_name, 1000.0)
    store.update_attempt(spec.job_name, number, end_time=1590.0, outcome="Completed")
    store.add_event(spec.job_name, "warning", "a metric regex never matched")
    store.set_rule_status(spec.job_name, "profiler", "ProfilerReport", "NoIssuesFound")
    store.set_rule_status(spec.job_name, "debugger", "LossNotDecreasing", "NoIssuesFound")
    store.transition(spec.job_name, "Completed", "Completed")
    return describe_record(store, store.get_job(spec.job_name))


@pytest.mark.parametrize("extra", [
    {"instance_count": 2, "use_spot_instances": True, "max_run": 600, "max_wait": 1200,
     "checkpoint_s3_uri": "file:///ck", "max_retry_attempts": 2, "keep_alive_period_in_seconds": 0},
    {"instance_groups": [InstanceGroup("a", "ml.c5.xlarge", 1), InstanceGroup("b", "ml.c5.2xlarge", 1)]},
], ids=["spot", "heterogeneous"])
def test_every_field_is_sagemaker_s_or_under_shipyard(home, tmp_path, extra):
    data, source = tmp_path / "data", tmp_path / "src"
    data.mkdir()
    source.mkdir()
    (source / "train.py").write_text("print('hi')\n")
    est = PyTorch(
        entry_point="train.py", source_dir=str(source), framework_version="2.1", py_version="py3",
        output_path=f"file://{tmp_path}/out", role="arn:aws:iam::111122223333:role/train", subnets=["subnet-1"],
        security_group_ids=["sg-1"], tags=[{"Key": "team", "Value": "ml"}],
        metric_definitions=[{"Name": "loss", "Regex": "loss=(\\S+)"}],
        environment={"A": "1"}, hyperparameters={"epochs": 2},
        debugger_hook_config=DebuggerHookConfig(collection_configs=[CollectionConfig(name="losses")]),
        rules=[Rule.sagemaker(rule_configs.loss_not_decreasing()),
               ProfilerRule.sagemaker(rule_configs.ProfilerReport())],
        profiler_config=ProfilerConfig(framework_profile_params=FrameworkProfile()),
        tensorboard_output_config=TensorBoardOutputConfig(s3_output_path=f"file://{tmp_path}/tb"), **extra)
    channels = {"train": TrainingInput(f"file://{data}", input_mode="Pipe", shuffle_config=ShuffleConfig(1),
                                       compression="Gzip"),
                "fs": FileSystemInput(file_system_id="fs-1", file_system_type="EFS", directory_path=str(data))}
    store = Store(home)
    description = _described(store, est._spec(channels, "job", store))

    model = _model()
    shape = model.operation_model("DescribeTrainingJob").output_shape
    unknown = _unknown({k: v for k, v in description.items() if k not in (OWN, "Tags")}, shape)
    assert unknown == [], ", ".join(unknown)
    assert _unknown({"Tags": description["Tags"]}, model.shape_for("TrainingJob")) == []
    assert description["Tags"] == [{"Key": "team", "Value": "ml"}]
    own = description[OWN]
    assert set(own) >= {"Cost", "Attempts", "Warnings", "OutputArtifacts"}
    assert own["Warnings"] == ["a metric regex never matched"]
    assert [a["Outcome"] for a in own["Attempts"]] == ["Completed"]
