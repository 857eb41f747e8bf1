"""init(): the process group from whatever launcher started this process.

torchrun (torch_distributed, smdistributed) exports RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR /
MASTER_PORT; mpirun exports OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK, and the rendezvous address is
MASTER_ADDR/MASTER_PORT when the launcher set them, else the first of SM_HOSTS (the leader when no
instance groups are used) on DEFAULT_PORT. A script run with no launcher
gets a world of one, so the same script runs anywhere."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from shipyard.errors import ValidationError
from shipyard.parallel import smddp
from shipyard.parallel.config import ParallelConfig, from_environment
from shipyard.runtime import process_group_exit
from shipyard.spec.smdistributed import PARAMETERS

DEFAULT_PORT = 29500
BACKENDS = PARAMETERS["ddp_dist_backend"].choices


def _launcher_env(environ) -> dict[str, str] | None:
    """RANK, WORLD_SIZE, LOCAL_RANK (and the rendezvous) from the launcher's variables; None: no launcher."""
    if "RANK" in environ and "WORLD_SIZE" in environ:
        return {}
    if "OMPI_COMM_WORLD_RANK" in environ:
        hosts = json.loads(environ.get("SM_HOSTS", '["127.0.0.1"]'))
        return {
            "RANK": environ["OMPI_COMM_WORLD_RANK"],
            "WORLD_SIZE": environ["OMPI_COMM_WORLD_SIZE"],
            "LOCAL_RANK": environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            "MASTER_ADDR": environ.get("MASTER_ADDR", hosts[0]),
            "MASTER_PORT": environ.get("MASTER_PORT", str(DEFAULT_PORT)),
        }
    return None


def choose_backend(config: ParallelConfig, backend: str | None = None) -> str:
    requested = backend or config.get("ddp_dist_backend", "auto")
    name = "backend" if backend else config.field("ddp_dist_backend")
    if requested not in BACKENDS:
        raise ValidationError(name, requested, f"must be one of {', '.join(BACKENDS)}")
    if requested == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    if requested == "nccl" and not torch.cuda.is_available():
        raise ValidationError(name, requested, "nccl needs a GPU and this process sees none; use 'gloo' or 'auto'")
    return requested


def init(backend: str | None = None, timeout_seconds: float = 1800) -> None:
    """Join (or, with no launcher, create) the default process group. Idempotent."""
    if dist.is_initialized():
        return
    process_group_exit.install(at_start=False)  # scripts run outside a job too
    chosen = choose_backend(from_environment(), backend)
    variables = _launcher_env(os.environ)
    timeout = timedelta(seconds=timeout_seconds)
    if variables is None:
        dist.init_process_group(chosen, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    else:
        os.environ.update(variables)
        if chosen == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(chosen, init_method="env://", timeout=timeout)


def device() -> torch.device:
    if dist.is_initialized() and smddp.serving() == "nccl":  # smddp: NCCL where there is a GPU
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1
