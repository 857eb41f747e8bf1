"""sagemaker_training.environment as a job's script imports it: the toolkit's Environment over the job's
config files, computed by the contract's TrainingEnvironment (so it agrees with the SM_* variables)."""
from __future__ import annotations

import importlib

import pytest

from shipyard.contract.config import input_data_config, resource_config, write_configs
from shipyard.contract.environment import TRAINING_ENV_KEYS, TrainingEnvironment
from shipyard.contract.hyperparameters import encode_json
from shipyard.contract.layout import Layout
from shipyard.errors import ValidationError
from shipyard.runtime import served_libraries
from shipyard.runtime.config import ChannelSource

HPS = {"epochs": 3, "lr": 0.1, "optimizer": "sgd", "layers": [4, 8], "verbose": True}
SDK_HPS = {"sagemaker_program": "train.py", "sagemaker_submit_directory": "s3://b/job/source/sourcedir.tar.gz",
           "sagemaker_torch_distributed_enabled": True, "sagemaker_s3_output": "s3://b/out"}


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A job's tree for host algo-2 of 2, as the agent writes it, and the module imported over it."""
    layout = Layout(tmp_path / "ml")
    channels = [ChannelSource(name="train", uri="s3://b/train"), ChannelSource(name="test", uri="s3://b/test")]
    write_configs(layout, encode_json({**HPS, **SDK_HPS}), resource_config("algo-2", ["algo-1", "algo-2"], "local"),
                  input_data_config(channels))
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", str(layout.base))
    for name, value in {"SM_NUM_GPUS": "0", "SM_NUM_CPUS": "3", "TRAINING_JOB_NAME": "job-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SAGEMAKER_TRAINING_MODULE", raising=False)
    monkeypatch.delenv("SAGEMAKER_PROGRAM", raising=False)
    served_libraries.install()
    from sagemaker_training import environment

    return layout, importlib.reload(environment)  # its module-level paths come from the environment


def test_environment_is_the_contracts_view_with_the_toolkits_types(tree):
    layout, environment = tree
    env = environment.Environment()
    contract = TrainingEnvironment.load(layout, job_name="job-1", num_gpus=0, num_cpus=3)
    assert dict(env) == contract.to_dict()
    assert env.to_env_vars() == {k: v for k, v in contract.to_env_vars().items() if k.startswith("SM_")}
    assert env.to_cmd_args() == contract.user_args

    assert env.hosts == ["algo-1", "algo-2"] and env.current_host == "algo-2"
    assert env.hyperparameters == HPS and isinstance(env.hyperparameters["lr"], float)
    assert env.channel_input_dirs == {name: str(layout.channel_dir(name)) for name in ("train", "test")}
    assert env.model_dir == str(layout.model_dir) == environment.model_dir
    assert all(isinstance(getattr(env, name), str) for name in ("input_dir", "input_config_dir", "output_dir",
                                                                  "output_data_dir", "module_dir"))
    assert (env.num_gpus, env.num_cpus, env.job_name) == (0, 3, "job-1")
    assert env.master_hostname == "algo-1" and env.is_master is False
    assert env.distribution_instance_groups == ["homogeneousCluster"]
    assert env.additional_framework_parameters == {"sagemaker_torch_distributed_enabled": True}
    assert (env.module_name, env.user_entry_point, env.framework_module) == ("train", "train.py", None)
    assert env.current_instance_type == "local" and env.log_level == 20
    assert env.sagemaker_s3_output() == "s3://b/out"

    # the toolkit's MappingMixin: properties by key, nothing else
    assert env["hosts"] == env.hosts and len(env) == len(TRAINING_ENV_KEYS) and "hosts" in env.properties()
    with pytest.raises(KeyError, match="non property to_env_vars"):
        env["to_env_vars"]


def test_arguments_replace_the_files_and_the_module_reads_them(tree):
    layout, environment = tree
    env = environment.Environment(hyperparameters={"batch": "32", "n": 2},
                                  resource_config=resource_config("algo-1", ["algo-1"], "ml.c5.xlarge"))
    assert env.hyperparameters == {"batch": "32", "n": 2}  # a string stays a string
    assert (env.hosts, env.current_instance_type, env.is_master) == (["algo-1"], "ml.c5.xlarge", True)
    assert environment.read_hyperparameters()["layers"] == [4, 8]
    assert environment.read_resource_config()["current_host"] == "algo-2"
    assert sorted(environment.read_input_data_config()) == ["test", "train"]
    assert environment.channel_path("train") == str(layout.channel_dir("train"))
    assert (environment.num_gpus(), environment.num_cpus()) == (0, 3)


def test_without_config_files_it_says_what_is_missing(tree):
    layout, environment = tree
    layout.resourceconfig_file.unlink()
    with pytest.raises(ValidationError, match="resourceconfig.json.*run inside a job, or set SAGEMAKER_BASE_DIR"):
        environment.Environment()
