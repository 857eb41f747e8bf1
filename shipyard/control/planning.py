"""From a job to what would run on each instance: resources, the backend's instance plans and, for
each, the launcher's command and the script's environment. The controller runs these plans;
`--dry-run` prints them."""

from __future__ import annotations

import json
import os
import random
import socket
from dataclasses import dataclass
from pathlib import Path

from shipyard.backends import get_backend
from shipyard.control import PLAN_FILE
from shipyard.backends.resources import MachineResources
from shipyard.errors import ShipyardError
from shipyard.runtime import launchers
from shipyard.runtime.launchers import tf_config
from shipyard.runtime.agent import script_environment
from shipyard.spec.job import JobSpec




@dataclass(frozen=True)
class InstanceLaunch:
    instance: object                 # the backend's InstancePlan
    launcher: str
    argv: list[str]                  # the entry point's command line inside the instance
    env: dict[str, str]              # what the contract and the launcher add to the environment


# Bases tried before giving up on finding `span` free ports in a row.
PORT_TRIES = 50
# Job ports come from below the kernel's ephemeral range: no outgoing connection and no bind(0) takes
# one, so a port found free stays free until the job's processes bind it seconds later (one from
# bind(0) could be taken in between by any connection this machine opens: S3, Ray, ...).
JOB_PORTS_FROM = 20000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_ports = random.SystemRandom()  # not the random module's state, which a seed makes repeat in every process


def free_port(span: int = 1) -> int:
    """A base port with base .. base + span - 1 all free now (TensorFlow's tasks take the ports above
    the job's master_port, see tf_config)."""
    for _ in range(PORT_TRIES):
        base = _candidate_port(span)
        if base + span <= 65536 and all(_bindable(port) for port in range(base, base + span)):
            return base
    raise ShipyardError(f"no {span} free ports in a row found on this machine after {PORT_TRIES} tries")


def _candidate_port(span: int) -> int:
    try:
        ephemeral = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768  # Linux's default
    if ephemeral - span > JOB_PORTS_FROM:
        return _ports.randrange(JOB_PORTS_FROM, ephemeral - span + 1)
    with socket.socket() as s:  # no room below the ephemeral range: let the kernel pick
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bindable(port: int) -> bool:
    # The wildcard address, as TensorFlow's servers bind it: taken on any interface means taken.
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def plan_job(
    spec: JobSpec, job_dir: Path, machine: MachineResources | None = None, master_port: int | None = None,
    attempt: int = 1,
) -> list[InstanceLaunch]:
    backend = get_backend(spec.backend, job_dir=job_dir)
    resources = backend.instance_resources(spec, machine)
    launches = []
    port = master_port or free_port(tf_config.port_span(spec.instance_count))
    for plan in backend.plan(spec, resources, port, attempt):
        env = plan.config.training_environment()
        launcher = launchers.select(env)
        launch = launcher.plan(env, plan.config.launch_context())
        added = script_environment(plan.config, env, launch.env, base={})
        launches.append(InstanceLaunch(plan, launcher.name, launch.argv, added))
    return launches


def write_plan(spec: JobSpec, job_dir: Path, launches: list[InstanceLaunch]) -> dict:
    """Lay out the planned instances and write the plan the controller runs. Done by the submitting
    client, which has everything imported already, so the controller can start instances the moment
    it starts."""
    backend = get_backend(spec.backend, job_dir=job_dir)
    for launch in launches:
        backend.prepare(launch.instance)
    plan = {"backend": spec.backend, "instances": [launch.instance.to_dict() for launch in launches]}
    tmp = job_dir / f"{PLAN_FILE}.tmp"
    tmp.write_text(json.dumps(plan, indent=2))
    os.replace(tmp, job_dir / PLAN_FILE)
    return plan
