import json

import pytest

from shipyard.contract.hyperparameters import RESERVED, decode, encode_json, encode_str, env_value, split, to_cmd_args
from shipyard.errors import ValidationError


def test_reserved_is_the_toolkit_list():
    assert RESERVED == {
        "sagemaker_program", "sagemaker_submit_directory", "sagemaker_enable_cloudwatch_metrics",
        "sagemaker_region", "sagemaker_container_log_level", "sagemaker_job_name",
        "default_user_module_name", "_tuning_objective_metric", "sagemaker_s3_output",
    }
    assert isinstance(RESERVED, frozenset)


def test_encode_json_is_json_dumps_of_each_value():
    encoded = encode_json({"epochs": 10, "optimizer": "adam", "flag": True, "d": {"b": 2, "a": 1},
                           "n": None, "lr": 1e-05, "l": [1, "x"]})
    assert encoded == {
        "epochs": "10",
        "optimizer": '"adam"',
        "flag": "true",
        "d": '{"b": 2, "a": 1}',  # the SDK's default json.dumps: spaced separators, insertion order
        "n": "null",
        "lr": "1e-05",
        "l": '[1, "x"]',
    }


def test_encode_json_refuses_a_value_json_cannot_hold():
    with pytest.raises(ValidationError) as info:
        encode_json({"ok": 1, "bad": object()})
    assert info.value.field == "hyperparameters['bad']"
    assert isinstance(info.value, ValueError)
    with pytest.raises(ValidationError):
        encode_json({"s": {1, 2}})


def test_encode_rejects_non_string_keys():
    with pytest.raises(ValidationError):
        encode_json({1: "a"})
    with pytest.raises(ValidationError):
        encode_str({("a",): "a"})


def test_encode_str_is_plain_str():
    assert encode_str({"d": {"a": 1}, "flag": True, "lr": 0.1, "s": "adam", "n": None}) == {
        "d": "{'a': 1}", "flag": "True", "lr": "0.1", "s": "adam", "n": "None",
    }


def test_decode_loads_json_and_keeps_what_does_not_parse():
    decoded = decode({
        "epochs": "10", "optimizer": '"adam"', "flag": "true", "lr": "1e-05", "n": "null",
        "d": '{"a": 1}', "raw": "adam", "repr": "{'a': 1}", "py_bool": "True", "empty": "",
    })
    assert decoded == {
        "epochs": 10, "optimizer": "adam", "flag": True, "lr": 1e-05, "n": None,
        "d": {"a": 1}, "raw": "adam", "repr": "{'a': 1}", "py_bool": "True", "empty": "",
    }
    assert type(decoded["epochs"]) is int


def test_encode_json_then_decode_round_trips():
    hps = {"a": 1, "b": 2.5, "c": "x y", "d": {"k": [1, None]}, "e": False}
    assert decode(encode_json(hps)) == hps


def test_split_separates_user_and_framework_and_drops_reserved():
    decoded = {
        "epochs": 3, "mp_parameters": {"partitions": 2}, "model_dir": "/opt/ml/model",
        "sagemaker_program": "train.py", "sagemaker_submit_directory": "s3://b/k",
        "sagemaker_region": "us-east-1", "sagemaker_job_name": "j", "sagemaker_container_log_level": 20,
        "sagemaker_enable_cloudwatch_metrics": False, "sagemaker_s3_output": "s3://o",
        "default_user_module_name": "m", "_tuning_objective_metric": "loss",
        "sagemaker_mpi_enabled": True, "sagemaker_distribution_instance_groups": ["g"],
    }
    user, framework = split(decoded)
    assert user == {"epochs": 3, "mp_parameters": {"partitions": 2}, "model_dir": "/opt/ml/model"}
    assert framework == {"sagemaker_mpi_enabled": True, "sagemaker_distribution_instance_groups": ["g"]}


def test_to_cmd_args_matches_the_toolkit():
    args = to_cmd_args({"a": 1, "batch-size": 32, "flag": True, "d": {"b": 2, "a": 1}, "l": ["1", ["2"]], "n": None})
    assert args == [
        "-a", "1",
        "--batch-size", "32",
        "-d", "a=1,b=2",
        "--flag", "True",
        "-l", "['1', ['2']]",
        "-n", "",
    ]


def test_to_cmd_args_value_formats():
    assert to_cmd_args({"un_der": False, "lr": 1e-05, "x": 4.0, "s": "a b", "dn": {"z": None, "y": True}}) == [
        "--dn", "y=True,z=None",
        "--lr", "1e-05",
        "-s", "a b",
        "--un_der", "False",
        "-x", "4.0",
    ]
    assert to_cmd_args({}) == []


def test_to_cmd_args_sorts_by_plain_string_order():
    assert to_cmd_args({"b": 1, "B": 2, "a-b": 3, "a_b": 4, "aa": 5})[::2] == ["-B", "--a-b", "--a_b", "--aa", "-b"]


def test_env_value_rules():
    assert env_value("adam") == "adam"
    assert env_value("") == ""
    assert env_value(None) == ""
    assert env_value(True) == "true"
    assert env_value(False) == "false"
    assert env_value(3) == "3"
    assert env_value(0.5) == "0.5"
    assert env_value({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert env_value(["x", {"d": 1, "c": None}]) == '["x",{"c":null,"d":1}]'
    assert env_value({"k": "é"}) == '{"k":"\\u00e9"}'  # ensure_ascii, as the toolkit
    assert env_value("é") == "é"
    assert json.loads(env_value({"z": 1, "a": 2})) == {"z": 1, "a": 2}
