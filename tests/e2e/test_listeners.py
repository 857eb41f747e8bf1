"""Every listening socket of a running 2-instance job, listed from the job's process tree while the
script holds them open: none may be outside loopback, except those docs/contract.md ("Network
listeners") names as exceptions (OpenMPI's own). Each job also shows the listeners it must have, on the
instance's own address, so that the check cannot pass with nothing to look at."""

from __future__ import annotations

import ipaddress
import re
import shutil
import time
from pathlib import Path
from typing import NamedTuple

import psutil
import pytest

from shipyard.pytorch import PyTorch
from shipyard.sdk.job import TrainingJob
from shipyard.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]
SCRIPTS = Path(__file__).parent / "scripts"
ADDRESSES = {"algo-1": "127.0.1.1", "algo-2": "127.0.1.2"}
TERMINAL = {"Completed", "Failed", "Stopped"}


class Listener(NamedTuple):
    pid: int
    cmdline: list[str]
    address: str
    port: int


def _run_holding_listeners(tmp_path: Path, distribution: dict) -> tuple[list[Listener], int]:
    """Start the job, list its listeners once both ranks are ready, and let it finish; (the listeners,
    the port of torch's store)."""
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(SCRIPTS / "listeners.py", source / "train.py")
    est = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=2, distribution=distribution,
                  stop_grace_seconds=5)
    est.fit(wait=False)
    job = est.latest_training_job
    try:
        store_port = _wait_until_ready(job, ranks=2)
        listeners = _listeners(job)
    finally:
        (Store().job_dir(job.name) / "release").touch()
    job.wait(logs="None")
    return listeners, store_port


def _wait_until_ready(job: TrainingJob, ranks: int, timeout: float = 120) -> int:
    """Wait until every rank has said it is ready; returns the store's port they said."""
    store = Store()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = "".join(path.read_text() for path in (store.log_path(job.name, host) for host in ADDRESSES)
                       if path.exists())
        ready = dict(re.findall(r"rank (\d+) ready, store at port (\d+)", logs))
        if len(ready) == ranks:
            return int(ready["0"])
        status = job.describe()["TrainingJobStatus"]
        assert status not in TERMINAL, f"the job ended ({status}) before its ranks were ready:\n{logs}"
        time.sleep(0.2)
    raise AssertionError(f"the ranks were not ready after {timeout:.0f}s")


def _listeners(job: TrainingJob) -> list[Listener]:
    """Every listening TCP socket of the job's controller and its descendants (the sandboxes, agents and
    everything they started)."""
    controller = psutil.Process(Store().get_job(job.name).controller_pid)
    found = []
    for process in [controller, *controller.children(recursive=True)]:
        try:
            cmdline = process.cmdline()
            sockets = [c.laddr for c in process.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        except psutil.NoSuchProcess:
            continue
        found += [Listener(process.pid, cmdline, address.ip, address.port) for address in sockets]
    return found


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback  # 0.0.0.0 and :: are not


def _describe(listeners: list[Listener]) -> str:
    return "\n".join(f"  {l.address}:{l.port} in pid {l.pid}: {' '.join(l.cmdline)}" for l in listeners)


def test_torchrun_job_listens_only_on_its_instances_addresses(home, tmp_path):
    listeners, store_port = _run_holding_listeners(tmp_path, {"torch_distributed": {"enabled": True}})
    outside = [listener for listener in listeners if not _is_loopback(listener.address)]
    assert not outside, f"listening outside loopback:\n{_describe(outside)}"
    # torchrun's rendezvous store on the leader's address, every rank's gloo on its own instance's.
    stores = [(l.address, "torch.distributed.run" in l.cmdline) for l in listeners if l.port == store_port]
    assert stores == [(ADDRESSES["algo-1"], True)], _describe(listeners)
    ranks = {l.address for l in listeners if "train.py" in l.cmdline and "torch.distributed.run" not in l.cmdline}
    assert ranks == set(ADDRESSES.values()), _describe(listeners)


def _mpi_rank(listener: Listener) -> bool:
    return listener.cmdline[1:3] == ["-m", "mpi4py"]


def _openmpi_process(listener: Listener) -> bool:
    return Path(listener.cmdline[0]).name in ("mpirun", "orted") or _mpi_rank(listener)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpi jobs need OpenMPI (make setup)")
def test_mpi_job_listens_outside_loopback_only_where_openmpi_must(home, tmp_path):
    listeners, store_port = _run_holding_listeners(tmp_path, {"mpi": {"enabled": True, "processes_per_host": 1}})
    outside = [listener for listener in listeners if not _is_loopback(listener.address)]
    unexpected = [listener for listener in outside if not _openmpi_process(listener)]
    assert not unexpected, f"listening outside loopback:\n{_describe(unexpected)}"
    # Exactly the exceptions docs/contract.md names, which OpenMPI 4.1 binds to the wildcard addresses
    # whatever its parameters say: one IPv4 and one IPv6 socket in each of its processes (mpirun's and
    # orted's out-of-band channel, each rank's TCP BTL), nothing more.
    by_process: dict[int, list[str]] = {}
    for listener in outside:
        by_process.setdefault(listener.pid, []).append(listener.address)
    assert len(by_process) == 4, _describe(outside)  # mpirun, orted, two ranks
    assert all(sorted(addresses) == ["0.0.0.0", "::"] for addresses in by_process.values()), _describe(outside)
    # torch's store (rank 0, on MASTER_ADDR) and every rank's gloo are on their instances' addresses.
    stores = [(l.address, _mpi_rank(l)) for l in listeners if l.port == store_port]
    assert stores == [(ADDRESSES["algo-1"], True)], _describe(listeners)
    ranks = {l.address for l in listeners if _mpi_rank(l) and _is_loopback(l.address)}
    assert ranks == set(ADDRESSES.values()), _describe(listeners)
