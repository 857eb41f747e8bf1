"""Where a job's listeners bind (docs/contract.md, "Network listeners"), as planned: every process is
told its instance's own address (SHIPYARD_BIND_ADDRESS), gloo is given the loopback interface where the
host name would not be the instance's; and the store binding itself (shipyard.runtime.bind)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import shipyard.runtime
from shipyard.backends.resources import MachineResources
from shipyard.contract import hyperparameters as hp
from shipyard.contract.config import resource_config
from shipyard.contract.environment import TrainingEnvironment
from shipyard.contract.layout import Layout
from shipyard.control.planning import plan_job
from shipyard.runtime import bind
from shipyard.runtime.launchers import LaunchContext, get
from shipyard.spec.job import JobSpec

MACHINE = MachineResources(vcpus=8, memory_gib=32.0, gpus=())
INJECT = Path(shipyard.runtime.__file__).parent / "inject"
TORCHRUN = {"sagemaker_torch_distributed_enabled": True}
FLAGS = {
    "torch_distributed": TORCHRUN,
    "mpi": {"sagemaker_mpi_enabled": True},
    "parameter_server": {"sagemaker_parameter_server_enabled": True},
    "multi_worker_mirrored_strategy": {"sagemaker_multi_worker_mirrored_strategy_enabled": True},
    "single": {},
}


def _spec(flags: dict, count: int = 2) -> JobSpec:
    return JobSpec(
        job_name="listener-plan",
        hyperparameters=hp.encode_json({"sagemaker_program": "train.py",
                                        "sagemaker_submit_directory": "file:///code/sourcedir.tar.gz", **flags}),
        instance_count=count, output_path="file:///out",
    )


@pytest.mark.parametrize("launcher", list(FLAGS))
def test_every_process_is_told_its_instances_own_address(tmp_path, mode, launcher):
    if launcher == "mpi" and mode == "plain":
        pytest.skip("mpi needs the sandbox")
    launches = plan_job(_spec(FLAGS[launcher]), tmp_path, MACHINE, master_port=29999)
    assert [launch.launcher for launch in launches] == [launcher] * 2
    assert [launch.env["SHIPYARD_BIND_ADDRESS"] for launch in launches] == ["127.0.1.1", "127.0.1.2"]


def test_gloo_gets_the_loopback_interface_only_outside_the_sandbox(tmp_path, mode):
    for launch in plan_job(_spec(TORCHRUN), tmp_path, MACHINE, master_port=29999):
        # In a sandbox gloo binds what the host name algo-N resolves to: the instance's own address.
        assert launch.env.get("GLOO_SOCKET_IFNAME") == ("lo" if mode == "plain" else None)
        assert launch.env["NCCL_SOCKET_IFNAME"] == "lo"


def test_gloo_keeps_its_own_choice_on_an_address_that_is_not_loopback(tmp_path):
    """A Ray node's address (here its placeholder before placement): lo would not reach the others."""
    layout = Layout(tmp_path / "ml")
    env = TrainingEnvironment(
        layout=layout, hyperparameters=_spec(TORCHRUN).hyperparameters,
        resource_config=resource_config("algo-1", ["algo-1", "algo-2"], "local", "lo"), input_data_config={},
        job_name="listener-plan", num_gpus=0, num_cpus=2,
    )
    addresses = {"algo-1": "node-of-algo-1", "algo-2": "node-of-algo-2"}
    plan = get("torch_distributed").plan(env, LaunchContext(master_port=1, host_addresses=addresses, sandboxed=False))
    assert "GLOO_SOCKET_IFNAME" not in plan.env and plan.env["MASTER_ADDR"] == "node-of-algo-1"


# -- shipyard.runtime.bind ---------------------------------------------------------------------

def test_a_store_listens_where_its_name_resolves_when_that_is_loopback_or_the_instances():
    assert bind.listen_address("127.0.1.2", "127.0.1.2") == (socket.AF_INET, "127.0.1.2")
    assert bind.listen_address("127.0.0.1", "127.0.1.2") == (socket.AF_INET, "127.0.0.1")
    assert bind.listen_address("::1", "127.0.1.2") == (socket.AF_INET6, "::1")
    assert bind.listen_address("192.0.2.7", "192.0.2.7") == (socket.AF_INET, "192.0.2.7")  # a Ray node's own
    assert bind.listen_address("192.0.2.7", "192.0.2.8") is None  # not this instance's: torch's default


def test_a_name_that_does_not_resolve_is_left_to_torch(monkeypatch):
    def unknown(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unknown)
    assert bind.listen_address("algo-9", "127.0.1.1") is None


# A job's process: TCPStore servers made the ways torch makes them (positional arguments as torchrun's
# static rendezvous passes them, keywords, port 0, the elastic agent's helper), then every listener.
STORES = """
import datetime, json, psutil
import torch.distributed as dist
from torch.distributed.elastic.utils.distributed import create_c10d_store

stores = [dist.TCPStore("127.0.1.5", 0, 1, True, wait_for_workers=False),
          dist.TCPStore(host_name="localhost", port=0, world_size=1, is_master=True, wait_for_workers=False,
                        use_libuv=False),
          create_c10d_store(is_server=True, server_addr="127.0.1.5", world_size=1, wait_for_workers=False)]
client = dist.TCPStore("127.0.1.5", stores[0].port, is_master=False, timeout=datetime.timedelta(seconds=10))
client.set("key", "value")
listening = [[c.laddr.ip, c.laddr.port] for c in psutil.Process().net_connections("inet") if c.status == "LISTEN"]
print(json.dumps({"ports": [s.port for s in stores], "listening": sorted(listening),
                  "value": stores[0].get("key").decode()}))
"""


def test_every_store_server_of_a_jobs_process_listens_on_loopback_or_its_instance():
    pytest.importorskip("torch")
    env = {**os.environ, "PYTHONPATH": str(INJECT), bind.ENV: "127.0.1.5"}
    done = subprocess.run([sys.executable, "-c", STORES], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    ports = seen["ports"]
    assert 0 not in ports and seen["value"] == "value"
    localhost = bind.listen_address("localhost", "127.0.1.5")[1]
    assert seen["listening"] == sorted([["127.0.1.5", ports[0]], [localhost, ports[1]], ["127.0.1.5", ports[2]]])
