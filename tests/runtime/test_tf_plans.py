"""The TensorFlow launchers' plans: the exact command, TF_CONFIG and parameter-server sidecar per instance."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest

from shipyard.backends import get_backend
from shipyard.backends.resources import MachineResources, plan_instances
from shipyard.contract import hyperparameters as hp
from shipyard.control.planning import plan_job
from shipyard.runtime import launchers
from shipyard.spec.catalog import get_instance_type
from shipyard.spec.job import JobSpec

MACHINE = MachineResources(vcpus=8, memory_gib=32.0, gpus=())
PORT = 40000
PS_FLAG = {"sagemaker_parameter_server_enabled": True}
MWMS_FLAG = {"sagemaker_multi_worker_mirrored_strategy_enabled": True}


def _spec(flags: dict, count: int) -> JobSpec:
    return JobSpec(
        job_name="tf-plan-test",
        hyperparameters=hp.encode_json({"epochs": 2, "sagemaker_program": "train.py",
                                        "sagemaker_submit_directory": "file:///code/sourcedir.tar.gz", **flags}),
        instance_count=count, output_path="file:///out",
    )


def _plans(tmp_path, monkeypatch, flags: dict, count: int, sandboxed: bool = False):
    """Per instance: (launcher name, its LaunchPlan, the script's whole environment). Planned without a
    sandbox (addresses); sandboxed=True replans each instance as it is planned inside one (host names)."""
    monkeypatch.setenv("SHIPYARD_SANDBOX", "off")
    spec = _spec(flags, count)
    result = []
    for launch in plan_job(spec, tmp_path, MACHINE, master_port=PORT):
        config = dataclasses.replace(launch.instance.config, sandboxed=sandboxed)
        env = config.training_environment()
        launcher = launchers.select(env)
        result.append((launcher.name, launcher.plan(env, config.launch_context()), launch.env))
    return result


def test_parameter_server_plan_per_instance(tmp_path, monkeypatch):
    plans = _plans(tmp_path, monkeypatch, PS_FLAG, count=3)
    # master and workers on master_port + i, parameter servers on master_port + 3 + i (host i of 3)
    cluster = {
        "master": ["127.0.1.1:40000"],
        "ps": ["127.0.1.1:40003", "127.0.1.2:40004", "127.0.1.3:40005"],
        "worker": ["127.0.1.2:40001", "127.0.1.3:40002"],
    }
    tasks = [{"index": 0, "type": "master"}, {"index": 0, "type": "worker"}, {"index": 1, "type": "worker"}]
    for index, (name, plan, script_env) in enumerate(plans):
        assert name == "parameter_server"
        assert plan.argv == [sys.executable, "train.py", "--epochs", "2"]
        assert json.loads(plan.env["TF_CONFIG"]) == {"cluster": cluster, "environment": "cloud", "task": tasks[index]}
        assert script_env["TF_CONFIG"] == plan.env["TF_CONFIG"]
        (server,) = plan.sidecars
        assert server.argv == [sys.executable, "-m", "shipyard.runtime.launchers.parameter_server"]
        assert server.env["CUDA_VISIBLE_DEVICES"] == ""
        assert json.loads(server.env["TF_CONFIG"]) == {
            "cluster": cluster, "environment": "cloud", "task": {"index": index, "type": "ps"}}
        assert server.sidecars == [] and server.name == f"parameter server ps:{index}"
    # the toolkit's key order, byte for byte
    assert plans[0][1].env["TF_CONFIG"] == (
        '{"cluster": {"master": ["127.0.1.1:40000"], "ps": ["127.0.1.1:40003", "127.0.1.2:40004", '
        '"127.0.1.3:40005"], "worker": ["127.0.1.2:40001", "127.0.1.3:40002"]}, "environment": "cloud", '
        '"task": {"index": 0, "type": "master"}}'
    )


def test_sandboxed_tf_config_names_hosts(tmp_path, monkeypatch):
    (_, first, _), (_, second, _) = _plans(tmp_path, monkeypatch, PS_FLAG, count=2, sandboxed=True)
    assert json.loads(second.env["TF_CONFIG"]) == {
        "cluster": {"master": ["algo-1:40000"], "ps": ["algo-1:40002", "algo-2:40003"], "worker": ["algo-2:40001"]},
        "environment": "cloud", "task": {"index": 0, "type": "worker"},
    }
    assert json.loads(first.sidecars[0].env["TF_CONFIG"])["task"] == {"index": 0, "type": "ps"}


def test_parameter_server_on_one_instance_is_a_single_process(tmp_path, monkeypatch):
    """The toolkit's rule (the SDK refuses such a job before it gets here)."""
    ((name, plan, script_env),) = _plans(tmp_path, monkeypatch, PS_FLAG, count=1)
    assert name == "single" and plan.sidecars == [] and "TF_CONFIG" not in script_env


def test_mwms_plan_per_instance(tmp_path, monkeypatch):
    plans = _plans(tmp_path, monkeypatch, MWMS_FLAG, count=2)
    for index, (name, plan, script_env) in enumerate(plans):
        assert name == "multi_worker_mirrored_strategy"
        assert plan.argv == [sys.executable, "train.py", "--epochs", "2"]
        assert plan.sidecars == []
        assert plan.env["TF_CONFIG"] == script_env["TF_CONFIG"] == (
            '{"cluster": {"worker": ["127.0.1.1:40000", "127.0.1.2:40001"]}, "environment": "cloud", '
            f'"task": {{"index": {index}, "type": "worker"}}}}'
        )
    (_, sandboxed, _), _ = _plans(tmp_path, monkeypatch, MWMS_FLAG, count=2, sandboxed=True)
    assert json.loads(sandboxed.env["TF_CONFIG"])["cluster"] == {"worker": ["algo-1:40000", "algo-2:40001"]}


@pytest.mark.parametrize(("flags", "expected"), [
    ({**PS_FLAG, "sagemaker_mpi_enabled": True}, "parameter_server"),   # TF toolkit: PS before mpi
    ({**MWMS_FLAG, "sagemaker_mpi_enabled": True}, "mpi"),              # MWMS only adds TF_CONFIG
])
def test_tensorflow_runner_precedence(tmp_path, flags, expected):
    resources = plan_instances([(get_instance_type("local"), 2)], MACHINE, False)
    configs = [plan.config for plan in get_backend("local", job_dir=tmp_path).plan(_spec(flags, 2), resources, PORT)]
    assert [launchers.select(config.training_environment()).name for config in configs] == [expected] * 2
