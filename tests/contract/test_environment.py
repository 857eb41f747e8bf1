import json

import pytest

from shipyard.contract.config import input_data_config, resource_config, write_configs
from shipyard.contract.environment import LAUNCHER_FLAGS, TrainingEnvironment
from shipyard.contract.hyperparameters import encode_json, encode_str
from shipyard.contract.layout import SANDBOX_BASE, Layout
from shipyard.spec.job import ChannelSpec

SPEC_1_8_KEYS = {
    "additional_framework_parameters", "channel_input_dirs", "current_host", "current_instance_group",
    "current_instance_group_hosts", "current_instance_type", "distribution_hosts",
    "distribution_instance_groups", "framework_module", "hosts", "hyperparameters", "input_config_dir",
    "input_data_config", "input_dir", "instance_groups", "instance_groups_dict", "is_hetero", "is_master",
    "is_modelparallel_enabled", "is_smddpmprun_installed", "is_smddprun_installed", "job_name", "log_level",
    "master_hostname", "model_dir", "module_dir", "module_name", "network_interface_name", "num_cpus",
    "num_gpus", "num_neurons", "output_data_dir", "output_dir", "output_intermediate_dir", "resource_config",
    "topology", "user_entry_point",
}
FILE_CHANNEL = {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}


def make_env(hps=None, *, host="algo-1", hosts=("algo-1",), channels=("train",), rc=None, layout=None,
             encode=encode_json, **kwargs):
    kwargs.setdefault("job_name", "job-1")
    kwargs.setdefault("num_gpus", 0)
    kwargs.setdefault("num_cpus", 4)
    return TrainingEnvironment(
        layout=layout or Layout(SANDBOX_BASE),
        hyperparameters=encode(hps or {}),
        resource_config=rc or resource_config(host, hosts, "ml.g5.2xlarge"),
        input_data_config={name: dict(FILE_CHANNEL) for name in channels},
        **kwargs,
    )


def compact(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def test_single_host_env_vars_exactly():
    env = make_env(
        {"sagemaker_program": "train.py", "sagemaker_submit_directory": "s3://b/job-1/source/sourcedir.tar.gz",
         "sagemaker_region": "us-west-2", "sagemaker_job_name": "job-1", "epochs": 2, "learning-rate": 0.001,
         "optimizer": "adam", "flag": True, "d": {"b": 2, "a": 1}},
        channels=("train", "Test"), num_gpus=1, num_cpus=8,
    )
    rc = resource_config("algo-1", ["algo-1"], "ml.g5.2xlarge")
    hps = {"epochs": 2, "learning-rate": 0.001, "optimizer": "adam", "flag": True, "d": {"a": 1, "b": 2}}
    idc = {"train": FILE_CHANNEL, "Test": FILE_CHANNEL}
    group = {"instance_group_name": "homogeneousCluster", "instance_type": "ml.g5.2xlarge", "hosts": ["algo-1"]}
    training_env = {
        "additional_framework_parameters": {},
        "channel_input_dirs": {"train": "/opt/ml/input/data/train", "Test": "/opt/ml/input/data/Test"},
        "current_host": "algo-1",
        "current_instance_group": "homogeneousCluster",
        "current_instance_group_hosts": ["algo-1"],
        "current_instance_type": "ml.g5.2xlarge",
        "distribution_hosts": [],
        "distribution_instance_groups": [],
        "framework_module": None,
        "hosts": ["algo-1"],
        "hyperparameters": hps,
        "input_config_dir": "/opt/ml/input/config",
        "input_data_config": idc,
        "input_dir": "/opt/ml/input",
        "instance_groups": ["homogeneousCluster"],
        "instance_groups_dict": {"homogeneousCluster": group},
        "is_hetero": False,
        "is_master": True,
        "is_modelparallel_enabled": False,
        "is_smddpmprun_installed": False,
        "is_smddprun_installed": False,
        "job_name": "job-1",
        "log_level": 20,
        "master_hostname": "algo-1",
        "model_dir": "/opt/ml/model",
        "module_dir": "s3://b/job-1/source/sourcedir.tar.gz",
        "module_name": "train",
        "network_interface_name": "eth0",
        "num_cpus": 8,
        "num_gpus": 1,
        "num_neurons": 0,
        "output_data_dir": "/opt/ml/output/data",
        "output_dir": "/opt/ml/output",
        "output_intermediate_dir": "/opt/ml/output/intermediate",
        "resource_config": rc,
        "topology": None,
        "user_entry_point": "train.py",
    }
    assert env.to_dict() == training_env
    user_args = ["-d", "a=1,b=2", "--epochs", "2", "--flag", "True", "--learning-rate", "0.001",
                 "--optimizer", "adam"]
    assert env.user_args == user_args
    assert env.to_env_vars() == {
        "SM_HOSTS": '["algo-1"]',
        "SM_NETWORK_INTERFACE_NAME": "eth0",
        "SM_HPS": '{"d":{"a":1,"b":2},"epochs":2,"flag":true,"learning-rate":0.001,"optimizer":"adam"}',
        "SM_USER_ENTRY_POINT": "train.py",
        "SM_FRAMEWORK_PARAMS": "{}",
        "SM_RESOURCE_CONFIG": compact(rc),
        "SM_INPUT_DATA_CONFIG": compact(idc),
        "SM_OUTPUT_DATA_DIR": "/opt/ml/output/data",
        "SM_CHANNELS": '["Test","train"]',
        "SM_CURRENT_HOST": "algo-1",
        "SM_CURRENT_INSTANCE_TYPE": "ml.g5.2xlarge",
        "SM_CURRENT_INSTANCE_GROUP": "homogeneousCluster",
        "SM_CURRENT_INSTANCE_GROUP_HOSTS": '["algo-1"]',
        "SM_INSTANCE_GROUPS": '["homogeneousCluster"]',
        "SM_INSTANCE_GROUPS_DICT": compact({"homogeneousCluster": group}),
        "SM_DISTRIBUTION_INSTANCE_GROUPS": "[]",
        "SM_IS_HETERO": "false",
        "SM_MODULE_NAME": "train",
        "SM_LOG_LEVEL": "20",
        "SM_FRAMEWORK_MODULE": "",
        "SM_INPUT_DIR": "/opt/ml/input",
        "SM_INPUT_CONFIG_DIR": "/opt/ml/input/config",
        "SM_OUTPUT_DIR": "/opt/ml/output",
        "SM_NUM_CPUS": "8",
        "SM_NUM_GPUS": "1",
        "SM_NUM_NEURONS": "0",
        "SM_MODEL_DIR": "/opt/ml/model",
        "SM_MODULE_DIR": "s3://b/job-1/source/sourcedir.tar.gz",
        "SM_TRAINING_ENV": compact(training_env),
        "SM_USER_ARGS": compact(user_args),
        "SM_OUTPUT_INTERMEDIATE_DIR": "/opt/ml/output/intermediate",
        "SM_CHANNEL_TRAIN": "/opt/ml/input/data/train",
        "SM_CHANNEL_TEST": "/opt/ml/input/data/Test",
        "SM_HP_EPOCHS": "2",
        "SM_HP_LEARNING-RATE": "0.001",
        "SM_HP_OPTIMIZER": "adam",
        "SM_HP_FLAG": "true",
        "SM_HP_D": '{"a":1,"b":2}',
        "TRAINING_JOB_NAME": "job-1",
        "CURRENT_HOST": "algo-1",
        "SAGEMAKER_JOB_NAME": "job-1",
        "SAGEMAKER_REGION": "us-west-2",
    }


def test_training_env_has_exactly_the_spec_keys_and_is_json():
    env = make_env({"sagemaker_program": "train.py"})
    assert set(env.to_dict()) == SPEC_1_8_KEYS
    for key in SPEC_1_8_KEYS:
        assert hasattr(env, key)
    parsed = json.loads(env.to_env_vars()["SM_TRAINING_ENV"])
    assert parsed == env.to_dict()
    assert env.to_env_vars()["SM_TRAINING_ENV"] == compact(parsed)  # compact, sorted keys


def test_reserved_hyperparameters_never_reach_the_script():
    env = make_env({"sagemaker_program": "train.py", "sagemaker_container_log_level": 10,
                    "_tuning_objective_metric": "loss", "sagemaker_mpi_enabled": True, "epochs": 1})
    env_vars = env.to_env_vars()
    assert env.hyperparameters == {"epochs": 1}
    assert env.additional_framework_parameters == {"sagemaker_mpi_enabled": True}
    assert env_vars["SM_FRAMEWORK_PARAMS"] == '{"sagemaker_mpi_enabled":true}'
    assert env_vars["SM_USER_ARGS"] == '["--epochs","1"]'
    assert [k for k in env_vars if k.startswith("SM_HP_")] == ["SM_HP_EPOCHS"]
    assert env.log_level == 10 and env_vars["SM_LOG_LEVEL"] == "10"


def test_hp_variable_names_keep_hyphens_and_dots():
    env_vars = make_env({"learning-rate": 0.1, "un_der": 1, "a.b": "x"}).to_env_vars()
    assert env_vars["SM_HP_LEARNING-RATE"] == "0.1"
    assert env_vars["SM_HP_UN_DER"] == "1"
    assert env_vars["SM_HP_A.B"] == "x"
    assert "SM_HP_LEARNING_RATE" not in env_vars


def test_generic_estimator_str_encoding_reaches_the_script_as_strings():
    env = make_env({"flag": True, "d": {"a": 1}, "n": 3}, encode=encode_str)
    env_vars = env.to_env_vars()
    assert env.hyperparameters == {"flag": "True", "d": "{'a': 1}", "n": 3}
    assert env_vars["SM_HP_FLAG"] == "True"
    assert env_vars["SM_HP_D"] == "{'a': 1}"
    assert env.user_args == ["-d", "{'a': 1}", "--flag", "True", "-n", "3"]


def test_two_host_torch_distributed_leader_is_algo_1():
    hps = {"sagemaker_program": "train.py", "sagemaker_torch_distributed_enabled": True}
    envs = {h: make_env(hps, host=h, hosts=["algo-2", "algo-1"]) for h in ("algo-1", "algo-2")}
    for host, env in envs.items():
        assert env.hosts == ["algo-1", "algo-2"]
        assert env.distribution_instance_groups == ["homogeneousCluster"]
        assert env.distribution_hosts == ["algo-1", "algo-2"]
        assert env.master_hostname == "algo-1"
        assert env.is_master is (host == "algo-1")
        assert env.to_env_vars()["SM_DISTRIBUTION_INSTANCE_GROUPS"] == '["homogeneousCluster"]'
    assert json.loads(envs["algo-2"].to_env_vars()["SM_TRAINING_ENV"])["is_master"] is False


@pytest.mark.parametrize("flag", LAUNCHER_FLAGS)
def test_every_launcher_flag_makes_the_current_group_distributed(flag):
    env = make_env({flag: True}, host="algo-2", hosts=["algo-1", "algo-2"])
    assert env.distribution_instance_groups == ["homogeneousCluster"]
    assert env.distribution_hosts == ["algo-1", "algo-2"]
    off = make_env({flag: False}, host="algo-2", hosts=["algo-1", "algo-2"])
    assert off.distribution_instance_groups == [] and off.distribution_hosts == []


def test_launcher_flag_list_is_the_toolkit_one():
    assert set(LAUNCHER_FLAGS) == {
        "sagemaker_mpi_enabled", "sagemaker_parameter_server_enabled",
        "sagemaker_distributed_dataparallel_enabled", "sagemaker_torch_distributed_enabled",
        "sagemaker_pytorch_ddp_enabled", "sagemaker_pytorch_xla_multi_worker_enabled",
        "sagemaker_multi_worker_mirrored_strategy_enabled",
    }


def unsorted_p4d(current):
    # Shape of a real 2-node p4d dump: top-level hosts sorted, the group's hosts not.
    return {
        "current_group_name": "homogeneousCluster", "current_host": current,
        "current_instance_type": "ml.p4d.24xlarge", "hosts": ["algo-1", "algo-2"],
        "instance_groups": [{"hosts": ["algo-2", "algo-1"], "instance_group_name": "homogeneousCluster",
                             "instance_type": "ml.p4d.24xlarge"}],
        "network_interface_name": "eth0",
    }


def test_real_p4d_dump_without_distribution():
    env = make_env({"sagemaker_program": "sagemaker_entrypoint.py"}, rc=unsorted_p4d("algo-2"))
    d = env.to_dict()
    assert d["current_instance_group_hosts"] == ["algo-2", "algo-1"]
    assert d["distribution_hosts"] == [] and d["distribution_instance_groups"] == []
    assert d["master_hostname"] == "algo-1" and d["is_master"] is False
    assert d["module_name"] == "sagemaker_entrypoint"


def test_leader_follows_group_order_when_distributed():
    env = make_env({"sagemaker_mpi_enabled": True}, rc=unsorted_p4d("algo-2"))
    assert env.distribution_hosts == ["algo-2", "algo-1"]
    assert env.master_hostname == "algo-2" and env.is_master is True


def hetero_rc(current):
    return {
        "current_host": current, "current_instance_type": "ml.c5.xlarge" if current == "algo-1" else "ml.p4d.24xlarge",
        "current_group_name": "cpu" if current == "algo-1" else "gpu",
        "hosts": ["algo-1", "algo-2", "algo-3"],
        "instance_groups": [
            {"instance_group_name": "cpu", "instance_type": "ml.c5.xlarge", "hosts": ["algo-1"]},
            {"instance_group_name": "gpu", "instance_type": "ml.p4d.24xlarge", "hosts": ["algo-3", "algo-2"]},
        ],
        "network_interface_name": "eth0",
    }


def test_distribution_instance_groups_hyperparameter_overrides():
    hps = {"sagemaker_mpi_enabled": True, "sagemaker_distribution_instance_groups": ["gpu"]}
    cpu = make_env(hps, rc=hetero_rc("algo-1"))
    gpu = make_env(hps, rc=hetero_rc("algo-2"))
    for env in (cpu, gpu):
        assert env.is_hetero is True
        assert env.instance_groups == ["cpu", "gpu"]
        assert env.distribution_instance_groups == ["gpu"]
        assert env.distribution_hosts == ["algo-3", "algo-2"]
        assert env.master_hostname == "algo-3"
        assert env.to_env_vars()["SM_IS_HETERO"] == "true"
    assert cpu.current_instance_group == "cpu" and cpu.current_instance_group_hosts == ["algo-1"]
    assert gpu.current_instance_group_hosts == ["algo-3", "algo-2"]
    assert cpu.is_master is False and gpu.is_master is False
    assert set(cpu.instance_groups_dict) == {"cpu", "gpu"}


def test_hetero_without_override_distributes_each_hosts_own_group():
    env = make_env({"sagemaker_torch_distributed_enabled": True}, rc=hetero_rc("algo-1"))
    assert env.distribution_instance_groups == ["cpu"]
    assert env.distribution_hosts == ["algo-1"] and env.is_master is True


def test_resource_config_without_groups_uses_toolkit_fallbacks():
    env = make_env(rc={"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]})
    assert env.instance_groups == [] and env.instance_groups_dict == {}
    assert env.current_instance_group == "homogeneousCluster"
    assert env.current_instance_group_hosts == []
    assert env.current_instance_type == "local"
    assert env.network_interface_name == "eth0"
    assert env.distribution_hosts == ["algo-1", "algo-2"]  # the toolkit's local-mode branch
    assert env.master_hostname == "algo-1" and env.is_hetero is False


def test_hosts_sort_lexicographically_past_nine():
    hosts = [f"algo-{i}" for i in range(1, 12)]
    env = make_env(host="algo-2", hosts=hosts, rc=None)
    assert env.hosts[:4] == ["algo-1", "algo-10", "algo-11", "algo-2"]
    assert json.loads(env.to_env_vars()["SM_HOSTS"]) == sorted(hosts)
    assert env.master_hostname == "algo-1"


def test_entry_point_and_module_name():
    env = make_env({"sagemaker_program": "train.py"})
    assert (env.user_entry_point, env.module_name) == ("train.py", "train")
    pkg = make_env({"sagemaker_program": "pkg.main"})
    assert pkg.module_name == "pkg.main"
    shell = make_env({"sagemaker_program": "run.sh"})
    assert shell.module_name == "run.sh"
    override = make_env({"sagemaker_program": "train.py"}, program="other.py")
    assert (override.user_entry_point, override.module_name) == ("other.py", "other")
    missing = make_env({})
    assert missing.user_entry_point is None
    assert missing.module_name == "None"  # the toolkit str()s the missing value
    assert missing.to_env_vars()["SM_USER_ENTRY_POINT"] == ""


def test_paths_live_under_the_layout_base(tmp_path):
    env = make_env({"sagemaker_program": "train.py"}, layout=Layout(tmp_path))
    env_vars = env.to_env_vars()
    assert env.model_dir == tmp_path / "model"
    assert env_vars["SM_MODEL_DIR"] == str(tmp_path / "model")
    assert env_vars["SM_CHANNEL_TRAIN"] == str(tmp_path / "input" / "data" / "train")
    assert env_vars["SM_OUTPUT_DATA_DIR"] == str(tmp_path / "output" / "data")
    assert env_vars["SM_MODULE_DIR"] == str(tmp_path / "code")  # module_dir default is the code dir
    assert env.to_dict()["input_config_dir"] == str(tmp_path / "input" / "config")


def test_job_name_and_region_variables():
    plain = make_env({}).to_env_vars()
    assert plain["TRAINING_JOB_NAME"] == "job-1" and plain["CURRENT_HOST"] == "algo-1"
    assert "SAGEMAKER_JOB_NAME" not in plain and "SAGEMAKER_REGION" not in plain
    assert make_env({}, region="eu-west-1").to_env_vars()["SAGEMAKER_REGION"] == "eu-west-1"
    hp_wins = make_env({"sagemaker_region": "us-east-1"}, region="eu-west-1").to_env_vars()
    assert hp_wins["SAGEMAKER_REGION"] == "us-east-1"
    assert make_env({"sagemaker_job_name": "x"}).to_env_vars()["SAGEMAKER_JOB_NAME"] == "x"


@pytest.mark.parametrize(
    ("hps", "expected"),
    [({"mp_parameters": {"partitions": 2}}, True), ({"mp_parameters": {}}, False),
     ({"mp_parameters": ""}, False), ({"mp_parameters": None}, False), ({}, False)],
)
def test_model_parallel_flag(hps, expected):
    env = make_env(hps)
    assert env.is_modelparallel_enabled is expected
    assert env.to_dict()["is_modelparallel_enabled"] is expected


def test_mp_parameters_are_also_a_user_argument():
    env = make_env({"mp_parameters": {"partitions": 2, "ddp": True}})
    assert env.user_args == ["--mp_parameters", "ddp=True,partitions=2"]
    assert env.to_env_vars()["SM_HP_MP_PARAMETERS"] == '{"ddp":true,"partitions":2}'


def test_framework_module():
    assert make_env().framework_module is None
    env = make_env(framework_module="sagemaker_pytorch_container.training:main")
    assert env.to_env_vars()["SM_FRAMEWORK_MODULE"] == "sagemaker_pytorch_container.training:main"
    assert env.to_dict()["framework_module"] == "sagemaker_pytorch_container.training:main"


def test_topology_only_when_present():
    assert "SM_TOPOLOGY" not in make_env().to_env_vars()
    rc = resource_config("algo-1", ["algo-1"], "ml.p6e-gb200.36xlarge")
    rc["topology"] = {"algo-1": "cu-1"}
    env = make_env(rc=rc)
    assert env.topology == {"algo-1": "cu-1"}
    assert env.to_env_vars()["SM_TOPOLOGY"] == '{"algo-1":"cu-1"}'
    assert env.to_dict()["topology"] == {"algo-1": "cu-1"}


def test_inputs_are_not_shared_with_the_caller():
    rc = resource_config("algo-1", ["algo-1"], "local")
    env = make_env(rc=rc)
    rc["hosts"].append("algo-9")
    assert env.hosts == ["algo-1"]


def test_load_reads_the_config_files(tmp_path):
    layout = Layout(tmp_path)
    hps = encode_json({"sagemaker_program": "train.py", "sagemaker_mpi_enabled": True, "epochs": 3})
    rc = resource_config("algo-2", ["algo-1", "algo-2"], "ml.g5.2xlarge")
    idc = input_data_config([ChannelSpec(name="train", uri="s3://b/t", content_type="text/csv")])
    write_configs(layout, hps, rc, idc)
    loaded = TrainingEnvironment.load(layout, job_name="j", num_gpus=2, num_cpus=8, region="us-east-1")
    direct = TrainingEnvironment(layout=layout, hyperparameters=hps, resource_config=rc, input_data_config=idc,
                                 job_name="j", num_gpus=2, num_cpus=8, region="us-east-1")
    assert loaded.to_env_vars() == direct.to_env_vars()
    assert loaded.hyperparameters == {"epochs": 3}
    assert loaded.is_master is False and loaded.master_hostname == "algo-1"
    assert loaded.input_data_config["train"]["ContentType"] == "text/csv"
