"""The Ray backend's pure parts: the resource mapping, the placement strategy, the exact command each
node runs, the controller's copies of the instance's files, and what is refused before anything runs."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from shipyard.backends import sandbox
from shipyard.backends.ray import placement as ray_placement
from shipyard.backends.ray.actor import subnet_of
from shipyard.backends.ray.backend import RayBackend, RayInstancePlan, node_job_dir
from shipyard.control.planning import plan_job
from shipyard.errors import ValidationError
from shipyard.runtime.launchers import get
from shipyard.spec.catalog import get_instance_type
from shipyard.spec.job import JobSpec


def _spec(**fields) -> JobSpec:
    base = dict(job_name="rayjob", instance_count=2, output_path="s3://out/jobs", backend="ray",
                hyperparameters={"sagemaker_program": '"train.py"',
                                 "sagemaker_submit_directory": '"s3://out/jobs/rayjob/source/sourcedir.tar.gz"'})
    return JobSpec(**{**base, **fields})


def test_instance_types_map_to_ray_resources():
    assert ray_placement.bundle(get_instance_type("local")) == {"CPU": 1.0}
    assert ray_placement.bundle(get_instance_type("local_gpu")) == {"CPU": 1.0, "GPU": 1.0}
    assert ray_placement.bundle(get_instance_type("ml.m5.xlarge")) == {"CPU": 4.0, "instance_type:ml.m5.xlarge": 1.0}
    g5 = get_instance_type("ml.g5.12xlarge")
    assert ray_placement.bundle(g5) == {"CPU": float(g5.vcpus), "GPU": float(g5.gpus), "instance_type:ml.g5.12xlarge": 1.0}


def test_plan_places_one_instance_per_node_and_runs_the_agent_in_the_sandbox(home, monkeypatch):
    monkeypatch.setenv("SHIPYARD_RAY_NODE_DIR", "/srv/nodes")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    job_dir = home / "jobs" / "rayjob"
    launches = plan_job(_spec(instance_type="ml.m5.xlarge"), job_dir, master_port=29400)
    plans = [launch.instance for launch in launches]
    node_dir = node_job_dir(job_dir, "rayjob")
    assert str(node_dir).startswith("/srv/nodes/rayjob-")
    for plan, host in zip(plans, ["algo-1", "algo-2"]):
        assert plan.host == host
        assert plan.bundle == {"CPU": 4.0, "instance_type:ml.m5.xlarge": 1.0}
        assert plan.strategy == "STRICT_SPREAD" and plan.address == "10.0.0.5:6379"
        assert plan.cpus_from_node is False and plan.config.num_cpus == 4   # the type's size, not this machine's
        agent = [sys.executable, "-m", "shipyard.runtime.agent", str(node_dir / "instances" / host / "agent.json")]
        if sandbox.bwrap_problem() is None:
            assert plan.argv == sandbox.wrap(agent, plan.node.config, job_dir=node_dir,
                                             hosts=node_dir / "instances" / host / "hosts", machine=sandbox.machine())
            assert plan.node.config.base == "/opt/ml"
        else:
            assert plan.argv == agent
        # The node writes under its own directory; the controller reads copies under the job's.
        assert plan.node.config.log_path == str(node_dir / "logs" / f"{host}.log")
        assert plan.config.log_path == str(job_dir / "logs" / f"{host}.log")
        assert plan.config.events_path == str(job_dir / "events" / f"{host}.jsonl")
        assert plan.ml_dir == job_dir / "instances" / host / "ml"
        # Addresses are the nodes', known once placed.
        assert plan.node.config.host_addresses == {"algo-1": "node-of-algo-1", "algo-2": "node-of-algo-2"}
        assert RayInstancePlan.from_dict(plan.to_dict()) == plan
    assert launches[0].launcher == "single"


def test_local_type_shares_the_node_and_pack_is_an_explicit_setting(home, monkeypatch):
    monkeypatch.setenv("SHIPYARD_RAY_PACK", "1")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("SHIPYARD_RAY_ADDRESS", raising=False)
    backend, spec = RayBackend(home / "jobs" / "j"), _spec(instance_count=3)
    plans = backend.plan(spec, backend.instance_resources(spec), 29400)
    assert [p.strategy for p in plans] == ["PACK"] * 3
    assert all(p.bundle == {"CPU": 1.0} and p.cpus_from_node for p in plans)
    assert plans[0].address == "auto"


def test_resources_of_this_machine_do_not_limit_a_ray_job(home):
    # 8 x 96 vCPUs and 64 GPUs would never fit here; on a cluster that is the cluster's business.
    launches = plan_job(_spec(instance_count=8, instance_type="ml.p4d.24xlarge"), home / "jobs" / "big")
    assert len(launches) == 8 and launches[0].instance.config.num_cpus == 96


@pytest.mark.parametrize("field, value", [
    ("output_path", "file:///home/me/out"),
    ("checkpoint_s3_uri", "file:///home/me/ckpt"),
])
def test_file_paths_are_refused_unless_shared(home, monkeypatch, field, value):
    fields = {field: value}
    if field == "checkpoint_s3_uri":
        fields.update(use_spot_instances=False)
    spec = _spec(**fields)
    with pytest.raises(ValidationError) as err:
        plan_job(spec, home / "jobs" / "x")
    assert err.value.field == field and "SHIPYARD_RAY_SHARED_STORAGE=1" in str(err.value)
    monkeypatch.setenv("SHIPYARD_RAY_SHARED_STORAGE", "1")
    assert len(plan_job(spec, home / "jobs" / "x")) == 2


def test_file_channel_is_refused_with_its_name(home):
    from shipyard.spec.job import ChannelSpec

    spec = _spec(channels=(ChannelSpec(name="train", uri="file:///data/train"),))
    with pytest.raises(ValidationError, match="channel train"):
        plan_job(spec, home / "jobs" / "x")


def test_mpi_on_ray_gives_mpirun_the_nodes_subnet(home):
    """Interface names may differ between hosts: mpirun gets the network, each rank its own interface."""
    if sandbox.bwrap_problem():
        pytest.skip(f"mpi needs the sandbox: {sandbox.bwrap_problem()}")
    spec = _spec(hyperparameters={**_spec().hyperparameters, "sagemaker_mpi_enabled": "true"})
    nodes = {"algo-1": "10.0.1.7", "algo-2": "10.0.1.9"}
    plans = {}
    for launch in plan_job(spec, home / "jobs" / "x", master_port=29400):
        # What the host's actor makes of the plan once placed (backends/ray/actor.py).
        config = dataclasses.replace(launch.instance.node.config, host_addresses=nodes, master_port=20000,
                                     network_interface={"algo-1": "ens5", "algo-2": "eth0"}[launch.instance.host],
                                     network_subnet="10.0.1.0/24")
        plans[launch.instance.host] = get("mpi").plan(config.training_environment(), config.launch_context())
    leader, worker = plans["algo-1"], plans["algo-2"]
    argv = leader.argv
    assert argv[argv.index("btl_tcp_if_include") + 1] == argv[argv.index("oob_tcp_if_include") + 1] == "10.0.1.0/24"
    assert not any(token.startswith("NCCL_SOCKET_IFNAME") for token in argv)
    assert (leader.env["NCCL_SOCKET_IFNAME"], worker.env["NCCL_SOCKET_IFNAME"]) == ("ens5", "eth0")
    assert leader.env["SHIPYARD_MPI_MAILBOX_PORT"] == worker.env["SHIPYARD_MPI_MAILBOX_PORT"] == "20003"


def test_the_subnet_is_the_network_of_the_interface_holding_the_address():
    assert subnet_of("127.0.0.1") == "127.0.0.0/8"


def test_waiting_message_names_the_shortage_and_the_fix():
    node = {"NodeID": "a", "Alive": True, "Resources": {"CPU": 1.0}}
    dead = {"NodeID": "b", "Alive": False, "Resources": {"CPU": 1.0}}
    message = ray_placement.waiting_message([{"CPU": 1.0}] * 2, "STRICT_SPREAD", [node, dead])
    assert message.startswith("waiting for capacity: 2 instance(s) of {CPU: 1}, each on its own node")
    assert "1 of the cluster's 1 alive node(s)" in message and "SHIPYARD_RAY_PACK=1" in message
    labelled = ray_placement.waiting_message([{"CPU": 4.0, "instance_type:ml.m5.xlarge": 1.0}], "STRICT_SPREAD", [node])
    assert "no node offers instance_type:ml.m5.xlarge" in labelled and "ray start --resources" in labelled
    busy = ray_placement.waiting_message([{"CPU": 1.0}], "STRICT_SPREAD", [node])
    assert "busy" in busy


def test_unknown_backend_names_the_valid_ones(home):
    with pytest.raises(ValidationError) as err:
        plan_job(_spec(backend="rai"), home / "jobs" / "x")
    assert "ray" in str(err.value)
