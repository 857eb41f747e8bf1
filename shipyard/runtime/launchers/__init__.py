"""Launchers, one module each, registered by name. The agent asks each registered launcher, highest
priority first, whether the job's framework parameters enable it (the toolkit's runner selection);
the single-process launcher always matches last. A new strategy is a new module listed here."""

from __future__ import annotations

from shipyard.registry import Registry
from shipyard.runtime.launchers.base import LaunchContext, Launcher, LaunchPlan

# imported only when used so the CLI stays fast.
REGISTRY = Registry("launchers", "launcher", {
    "mpi": "shipyard.runtime.launchers.mpi:MPI",
    "torch_distributed": "shipyard.runtime.launchers.torchrun:TorchDistributed",
    "pytorchddp": "shipyard.runtime.launchers.torchrun:PyTorchDDP",
    "smdistributed": "shipyard.runtime.launchers.smdistributed:SMDistributed",
    "parameter_server": "shipyard.runtime.launchers.parameter_server:ParameterServer",
    "multi_worker_mirrored_strategy": "shipyard.runtime.launchers.mwms:MultiWorkerMirrored",
    "single": "shipyard.runtime.launchers.single:SingleProcess",
})


def get(name: str) -> Launcher:
    return REGISTRY.load(name)()


def select(env) -> Launcher:
    launchers = sorted((get(name) for name in REGISTRY), key=lambda launcher: -launcher.priority)
    return next(launcher for launcher in launchers if launcher.enabled(env))


__all__ = ["REGISTRY", "LaunchContext", "LaunchPlan", "Launcher", "get", "select"]
