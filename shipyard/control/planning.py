"""From a job to what would run on each instance: resources, the backend's instance plans and, for
each, the launcher's command and the script's environment. The controller runs these plans;
`--dry-run` prints them."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from shipyard.backends import get_backend
from shipyard.control import PLAN_FILE
from shipyard.backends.resources import MachineResources
from shipyard.runtime import launchers
from shipyard.runtime.launchers import tf_config
from shipyard.runtime.ports import free_port
from shipyard.runtime.agent import script_environment
from shipyard.spec.job import JobSpec




@dataclass(frozen=True)
class InstanceLaunch:
    instance: object                 # the backend's InstancePlan
    launcher: str
    argv: list[str]                  # the entry point's command line inside the instance
    env: dict[str, str]              # what the contract and the launcher add to the environment




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
        launcher = launchers.for_instance(env, plan.config.algorithm)
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
