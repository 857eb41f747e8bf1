"""Launchers, one module each, registered by name. The agent asks each registered launcher, highest
priority first, whether the job's framework parameters enable it (the toolkit's runner selection);
the single-process launcher always matches last, and is the one for hosts outside the distribution's
instance group. A new strategy is a new module listed here."""

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


def for_instance(env, algorithm: str | None) -> Launcher:
    """What runs on an instance: a built-in algorithm's image runs the algorithm on every host (AgentConfig's
    `algorithm`), any other job its strategy's launcher (`select`)."""
    if algorithm is None:
        return select(env)
    from shipyard.runtime.launchers.algorithm import BuiltInAlgorithm

    return BuiltInAlgorithm(algorithm)


def select(env) -> Launcher:
    """The launcher for this host. In a heterogeneous job only the distribution's group runs the
    strategy's launcher; every other host runs the entry point plainly (the toolkit's rule)."""
    if env.is_hetero and env.current_instance_group not in env.distribution_instance_groups:
        return get("single")
    launchers = sorted((get(name) for name in REGISTRY), key=lambda launcher: -launcher.priority)
    return next(launcher for launcher in launchers if launcher.enabled(env))


__all__ = ["REGISTRY", "LaunchContext", "LaunchPlan", "Launcher", "for_instance", "get", "select"]
