import json
import stat

import pytest

from shipyard.contract.config import input_data_config, resource_config, write_configs
from shipyard.contract.layout import Layout
from shipyard.errors import ValidationError
from shipyard.spec.job import ChannelSpec


def test_resource_config_shape_and_lexicographic_hosts():
    rc = resource_config("algo-2", ["algo-2", "algo-10", "algo-1"], "ml.p4d.24xlarge")
    assert rc == {
        "current_host": "algo-2",
        "current_instance_type": "ml.p4d.24xlarge",
        "current_group_name": "homogeneousCluster",
        "hosts": ["algo-1", "algo-10", "algo-2"],
        "instance_groups": [
            {"instance_group_name": "homogeneousCluster", "instance_type": "ml.p4d.24xlarge",
             "hosts": ["algo-1", "algo-10", "algo-2"]},
        ],
        "network_interface_name": "eth0",
    }
    # The group's list is its own object, so editing one does not edit the other.
    assert rc["instance_groups"][0]["hosts"] is not rc["hosts"]


def test_resource_config_interface_and_json_round_trip():
    rc = resource_config("algo-1", ("algo-1",), "local", network_interface_name="lo")
    assert rc["network_interface_name"] == "lo"
    assert json.loads(json.dumps(rc)) == rc


def test_resource_config_refuses_a_current_host_outside_hosts():
    with pytest.raises(ValidationError):
        resource_config("algo-3", ["algo-1", "algo-2"], "local")


def test_input_data_config_defaults_and_content_type():
    channels = [
        ChannelSpec(name="train", uri="s3://b/train"),
        ChannelSpec(name="test", uri="file:///data/test", distribution="ShardedByS3Key",
                    content_type="text/csv", record_wrapping="RecordIO", input_mode="Pipe"),
    ]
    assert input_data_config(channels) == {
        "train": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"},
        "test": {"ContentType": "text/csv", "TrainingInputMode": "Pipe", "S3DistributionType": "ShardedByS3Key",
                 "RecordWrapperType": "RecordIO"},
    }
    assert "ContentType" not in input_data_config(channels)["train"]
    assert input_data_config([]) == {}


def test_write_configs_writes_the_three_files(tmp_path):
    layout = Layout(tmp_path / "fresh" / "opt" / "ml")  # nothing exists yet
    hps = {"epochs": "10", "optimizer": '"adam"', "sagemaker_program": '"train.py"'}
    rc = resource_config("algo-1", ["algo-1", "algo-2"], "local")
    idc = {"train": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}}
    write_configs(layout, hps, rc, idc)
    assert json.loads(layout.hyperparameters_file.read_text()) == hps  # str -> str, unchanged
    assert json.loads(layout.resourceconfig_file.read_text()) == rc
    assert json.loads(layout.inputdataconfig_file.read_text()) == idc
    assert sorted(p.name for p in layout.input_config_dir.iterdir()) == [
        "hyperparameters.json", "inputdataconfig.json", "resourceconfig.json",
    ]  # no temp files left behind
    for path in layout.input_config_dir.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_write_configs_overwrites(tmp_path):
    layout = Layout(tmp_path)
    write_configs(layout, {"a": "1"}, {"hosts": ["algo-1"]}, {})
    write_configs(layout, {"b": "2"}, {"hosts": ["algo-2"]}, {"x": {}})
    assert json.loads(layout.hyperparameters_file.read_text()) == {"b": "2"}
    assert json.loads(layout.resourceconfig_file.read_text()) == {"hosts": ["algo-2"]}
    assert json.loads(layout.inputdataconfig_file.read_text()) == {"x": {}}


def test_write_configs_refuses_unencoded_hyperparameters(tmp_path):
    layout = Layout(tmp_path)
    with pytest.raises(ValidationError) as info:
        write_configs(layout, {"epochs": 10}, {}, {})
    assert info.value.field == "hyperparameters.epochs"
    assert not layout.hyperparameters_file.exists()
