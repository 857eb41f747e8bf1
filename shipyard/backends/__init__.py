"""Where instances run. A backend turns a job into instance plans (`plan()`, pure: the exact command
line and environment of every instance) and starts them; the controller never cares which backend."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from shipyard.registry import Registry

if TYPE_CHECKING:
    from collections.abc import Callable

    from shipyard.backends.resources import InstanceResources, MachineResources
    from shipyard.spec.job import JobSpec
    from shipyard.storage.transfer import Progress

REGISTRY = Registry("backends", "backend", {
    "local": "shipyard.backends.local:LocalBackend",
    "ray": "shipyard.backends.ray.backend:RayBackend",
})


class Instance(Protocol):
    """A started instance as the controller sees it, whichever backend runs it."""

    plan: Any        # the backend's plan_type
    control: Any     # send(action, **fields): pause/resume requests to the agent (runtime/control.py)

    @property
    def host(self) -> str: ...

    @property
    def location(self) -> str:
        """Where it runs, for people: "pid 1234", "node 1a2b3c (10.0.0.7)"."""

    @property
    def waiting_for(self) -> str | None:
        """Why it has not started yet (no capacity): the job shows Pending with this message."""

    @property
    def lost_reason(self) -> str | None:
        """Set when the instance vanished with its machine rather than its agent exiting: a spot
        interruption for spot jobs, a platform failure naming the machine otherwise."""

    def poll(self) -> int | None: ...

    def terminate(self) -> None:
        """The notice: SIGTERM to the agent and the script, which get their grace period."""

    def kill(self) -> None: ...


class WarmInstance(Instance, Protocol):
    """An instance of a job with keep_alive_period_in_seconds (backends/pool.py locally, RayInstance on
    Ray): what the controller and a pool's keeper (control/pools.py) ask of it besides an Instance's."""

    @property
    def started(self) -> bool:
        """Whether the job reached the warm process (not while the sandbox still boots)."""

    def detach(self) -> None:
        """The job ended and the pool is kept: the warm process waits for the next job."""

    def alive(self) -> bool:
        """Whether its warm sandbox still runs (the keeper ends the pool when one does not)."""

    def release(self) -> None:
        """Stop the warm sandbox (the pool ended)."""

    def member(self) -> dict:
        """What the pool records of it: the warm process's pid, a Ray node's address."""


class Backend(Protocol):
    name: str
    plan_type: type
    queued: bool   # its jobs wait in shipyard's capacity queue (store/queue.py) until their instances fit

    def instance_resources(self, spec: JobSpec, machine: MachineResources | None) -> list[InstanceResources]:
        """Each instance's share of what it runs on."""

    def plan(self, spec: JobSpec, resources: list, master_port: int, attempt: int = 1) -> list:
        """Pure: every instance's exact command line and agent configuration."""

    def prepare(self, plan: Any) -> None: ...

    def start(self, plan: Any) -> Instance: ...

    def attach(self, plan: Any, warm_pool: str, connection: int | None = None) -> WarmInstance:
        """Run the instance on the warm process `warm_pool` keeps for its host (`connection`: one the
        submitting client already sent the job on)."""

    def rejoin(self, kept: list, master_port: int) -> None:
        """Instances kept from the last attempt (paused survivors of a lost one) rejoin the instances this
        backend started: told the rendezvous port and where every host now is."""

    def needs_new_process(self) -> str | None:
        """Why this process cannot start the next attempt's instances, or None. The job then continues in
        a new controller process (a Ray cluster whose head was restarted: Ray lets a process connect once)."""

    def upload_artifacts(self, instances: list, output: str, progress: Callable[[str], Progress]) -> dict:
        """The job's tarballs (storage/archive.py ARTIFACTS), each host's directory merged, uploaded under
        `output`, `progress(tarball)` told how each goes; returns {tarball: (files, bytes)}."""


def get_backend(name: str, **kwargs) -> Backend:
    return REGISTRY.load(name)(**kwargs)
