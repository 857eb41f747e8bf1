"""plan() says exactly what would run, per instance, without running it."""

from __future__ import annotations

import json
import socket
import sys

import pytest

from shipyard.backends import sandbox
from shipyard.backends.resources import MachineResources
from shipyard.control.planning import plan_job
from shipyard.contract import hyperparameters as hp
from shipyard.errors import ShipyardError
from shipyard.spec.job import JobSpec

MACHINE = MachineResources(vcpus=8, memory_gib=32.0, gpus=())


def _spec(distribution: dict | None = None, entry: str = "train.py", count: int = 2, **hps) -> JobSpec:
    return JobSpec(
        job_name="plan-test",
        hyperparameters={
            **hp.encode_json(hps),
            **hp.encode_json({"sagemaker_program": entry, "sagemaker_submit_directory": "file:///code/sourcedir.tar.gz",
                              **(distribution or {})}),
        },
        instance_count=count,
        output_path="file:///out",
    )


def test_torchrun_plan_per_instance(tmp_path, mode):
    spec = _spec({"sagemaker_torch_distributed_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 2},
                 epochs=3, lr=0.01)
    launches = plan_job(spec, tmp_path, MACHINE, master_port=29999)
    assert [launch.launcher for launch in launches] == ["torch_distributed"] * 2
    for rank, launch in enumerate(launches):
        host = f"algo-{rank + 1}"
        master = "algo-1" if mode == "sandbox" else "127.0.1.1"
        assert launch.argv == [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "2",
            "--master_addr", master, "--master_port", "29999", "--node_rank", str(rank),
            "train.py", "--epochs", "3", "--lr", "0.01",
        ]
        env = launch.env
        base = "/opt/ml" if mode == "sandbox" else str(tmp_path / "instances" / host / "ml")
        assert env["SM_CURRENT_HOST"] == host
        assert env["SM_HOSTS"] == '["algo-1","algo-2"]'
        assert env["SM_MODEL_DIR"] == f"{base}/model"
        assert env["MASTER_ADDR"] == master and env["MASTER_PORT"] == "29999"
        assert env["CUDA_VISIBLE_DEVICES"] == "" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert env["PYTHONPATH"].split(":")[1] == f"{base}/code"
        assert json.loads(env["SM_USER_ARGS"]) == ["--epochs", "3", "--lr", "0.01"]
        agent = [sys.executable, "-m", "shipyard.runtime.agent", str(tmp_path / "instances" / host / "agent.json")]
        executed = launch.instance.argv
        assert executed[-4:] == agent
        if mode == "sandbox":
            assert executed[0].endswith("bwrap")
            assert executed[executed.index("--hostname") + 1] == host
            bind = executed.index("--bind")
            assert executed[bind + 1:bind + 3] == [str(tmp_path / "instances" / host / "ml"), "/opt/ml"]
            assert "--die-with-parent" in executed and "--unshare-pid" in executed
        else:
            assert executed == agent


@pytest.mark.parametrize(
    ("entry", "expected"),
    [("train.py", ["{py}", "train.py", "-a", "1"]), ("run.sh", ["/bin/sh", "run.sh", "-a", "1"]),
     ("tool", ["./tool", "-a", "1"])],
)
def test_single_process_plan_by_entry_point_type(tmp_path, entry, expected, monkeypatch):
    monkeypatch.setenv("SHIPYARD_SANDBOX", "off")
    (launch,) = plan_job(_spec(entry=entry, count=1, a=1), tmp_path, MACHINE, master_port=1)
    assert launch.launcher == "single"
    assert launch.argv == [part.format(py=sys.executable) for part in expected]


def test_hosts_file_resolves_every_instance():
    addresses = {f"algo-{i}": sandbox.host_address(i) for i in (1, 2, 255)}
    text = sandbox.hosts_file(addresses)
    assert "127.0.1.1\talgo-1" in text and "127.0.1.2\talgo-2" in text and "127.0.2.1\talgo-255" in text


def test_free_port_reserves_the_whole_span(monkeypatch):
    """TensorFlow's tasks take the ports above master_port: a base whose block holds a taken port is
    passed over, whatever address the taker bound."""
    from shipyard.runtime import ports

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        real = ports._candidate_port
        candidates = iter([port - 3])  # its block port-3 .. port holds the taken port
        monkeypatch.setattr(ports, "_candidate_port", lambda span: next(candidates, None) or real(span))
        base = ports.free_port(span=4)
        assert not base <= port <= base + 3
        for free in range(base, base + 4):
            socket.create_server(("", free)).close()


def test_job_ports_come_from_below_the_ephemeral_range(monkeypatch, tmp_path):
    """No outgoing connection takes a port there between the pick and the job's bind."""
    from shipyard.runtime import ports

    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", tmp_path / "range")
    (tmp_path / "range").write_text("32768\t60999\n")  # Linux's default
    for _ in range(20):
        base = ports.free_port(span=4)
        assert ports.JOB_PORTS_FROM <= base and base + 4 <= 32768
    (tmp_path / "range").write_text("1024\t65535\n")  # no room below it: the kernel's pick
    assert 1024 <= ports.free_port() <= 65535


def test_free_port_gives_up_clearly(monkeypatch):
    from shipyard.runtime import ports

    monkeypatch.setattr(ports, "_candidate_port", lambda span: 65535)
    with pytest.raises(ShipyardError, match="no 2 free ports in a row"):
        ports.free_port(span=2)


def test_a_job_reserves_two_ports_per_instance_for_tensorflow(tmp_path, monkeypatch):
    from shipyard.control import planning

    spans = []
    monkeypatch.setattr(planning, "free_port", lambda span: spans.append(span) or 40000)
    plan_job(_spec(count=3), tmp_path, MACHINE)
    assert spans == [6]
