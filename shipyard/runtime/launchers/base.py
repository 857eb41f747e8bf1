"""The launcher interface: a pure `plan()` from the training environment to the exact command line and
the environment it adds, so tests check it without running anything."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from shipyard.contract.environment import TrainingEnvironment


@dataclass(frozen=True)
class LaunchContext:
    """What the platform knows that the /opt/ml contract does not say."""

    master_port: int
    host_addresses: dict[str, str]
    sandboxed: bool               # host names resolve inside a sandbox; outside, use addresses
    python: str = sys.executable
    instance_dir: str | None = None  # this instance's own directory, where a launcher keeps its files
    network_subnet: str | None = None  # AgentConfig.network_subnet

    def address(self, host: str) -> str:
        return host if self.sandboxed else self.host_addresses[host]


@dataclass(frozen=True)
class LaunchPlan:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # Processes the agent starts before argv, e.g. TensorFlow's parameter server on every instance. One
    # that exits while argv runs fails the instance. Once argv has succeeded they get SIGTERM and time to
    # finish (then SIGKILL); after a failure or a stop they are SIGKILLed at once.
    sidecars: list[LaunchPlan] = field(default_factory=list)
    name: str = ""  # what a sidecar is called in the log and in the failure it causes
    # (address, port) the agent waits to see listening before it starts argv: a torchrun whose leader's
    # store is not up yet backs off for about a second before trying again, on every follower.
    wait_for: tuple[str, int] | None = None


class Launcher(Protocol):
    name: str
    priority: int

    def enabled(self, env: TrainingEnvironment) -> bool: ...

    def plan(self, env: TrainingEnvironment, ctx: LaunchContext) -> LaunchPlan: ...


# Between a line's label (its host, or its process, rank_label) and its text wherever log lines are shown.
LABEL_SEPARATOR = " | "


def rank_label(host: str, local_rank: int | str) -> str:
    """`algo-1[1]` (local rank 1): what starts each line of one process's output, then LABEL_SEPARATOR, in
    the log of a host of several processes, as torchrun's --tee prefixes its lines. A host of one process
    leaves its lines as they are; shown, they are labelled with the host (sdk/watch.py), and read alike."""
    return f"{host}[{local_rank}]"


def split_rank_label(host: str, line: str) -> tuple[str | None, str]:
    """(its label, the rest) of a line of `host`'s log that one of several processes wrote, else (None, line)."""
    head = f"{host}["
    if line.startswith(head):
        rank, sep, rest = line[len(head):].partition("]" + LABEL_SEPARATOR)
        if sep and rank.isdigit():
            return rank_label(host, rank), rest
    return None, line


def processes_per_host(env: TrainingEnvironment) -> int:
    """The toolkit's rule: sagemaker_mpi_num_of_processes_per_host, else the GPU count, else 1."""
    configured = env.additional_framework_parameters.get("sagemaker_mpi_num_of_processes_per_host")
    if configured:
        return int(configured)
    return env.num_gpus or 1

