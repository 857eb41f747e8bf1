"""The smdistributed launcher's exact command line and environment per instance (torchrun, SMP v2
style), and torchrun winning when torch_distributed is set too."""

from __future__ import annotations

import json
import sys

import pytest

from shipyard.backends.resources import MachineResources
from shipyard.contract import hyperparameters as hp
from shipyard.control.planning import plan_job
from shipyard.spec import distribution as dist
from shipyard.spec.job import JobSpec

MACHINE = MachineResources(vcpus=8, memory_gib=32.0, gpus=())
PARAMETERS = {"hybrid_shard_degree": 2, "bf16": True}


def _spec(distribution: dict) -> JobSpec:
    enabled = dist.normalize(distribution)
    return JobSpec(
        job_name="plan-smd",
        hyperparameters={**hp.encode_json({"epochs": 2}), **hp.encode_json({
            "sagemaker_program": "train.py", "sagemaker_submit_directory": "file:///code/sourcedir.tar.gz",
            **dist.to_hyperparameters(enabled, "local")})},
        instance_count=2, output_path="file:///out",
    )


@pytest.fixture(autouse=True)
def plain(monkeypatch):
    monkeypatch.setenv("SHIPYARD_SANDBOX", "off")


def _torchrun(rank: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
            "--master_addr", "127.0.1.1", "--master_port", "29123", "--node_rank", str(rank), "train.py", *args]


def test_modelparallel_plan_per_instance(tmp_path):
    launches = plan_job(_spec({"smdistributed": {"modelparallel": {"enabled": True, "parameters": PARAMETERS}}}),
                        tmp_path, MACHINE, master_port=29123)
    assert [launch.launcher for launch in launches] == ["smdistributed"] * 2
    for rank, launch in enumerate(launches):
        # mp_parameters has no sagemaker_ prefix: a user argument too, as on SageMaker
        assert launch.argv == _torchrun(rank, "--epochs", "2", "--mp_parameters", "bf16=True,hybrid_shard_degree=2")
        assert json.loads(launch.env["SM_HP_MP_PARAMETERS"]) == PARAMETERS
        assert launch.env["MASTER_ADDR"] == "127.0.1.1" and launch.env["MASTER_PORT"] == "29123"
        assert launch.env["NCCL_PROTO"] == "simple"
        assert json.loads(launch.env["SM_FRAMEWORK_PARAMS"])["sagemaker_distributed_dataparallel_enabled"] is False


def test_dataparallel_plan(tmp_path):
    launches = plan_job(_spec({"smdistributed": {"dataparallel": {"enabled": True}}}), tmp_path, MACHINE,
                        master_port=29123)
    assert [launch.launcher for launch in launches] == ["smdistributed"] * 2
    assert launches[1].argv == _torchrun(1, "--epochs", "2")
    assert "SM_HP_MP_PARAMETERS" not in launches[1].env


def test_torch_distributed_wins_and_the_library_still_sees_mp_parameters(tmp_path):
    launches = plan_job(_spec({"torch_distributed": {"enabled": True},
                               "smdistributed": {"modelparallel": {"enabled": True, "parameters": PARAMETERS}}}),
                        tmp_path, MACHINE, master_port=29123)
    assert [launch.launcher for launch in launches] == ["torch_distributed"] * 2
    assert json.loads(launches[0].env["SM_HP_MP_PARAMETERS"]) == PARAMETERS
