"""The embedded default: every instance is an agent process on this machine, in a bubblewrap sandbox
when the machine allows it (private /opt/ml, host name algo-N), else a plain process whose SM_*
variables point at the instance's own directory (scripts that hard-code /opt/ml then cannot work)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from shipyard.backends import pool, sandbox
from shipyard.backends.resources import InstanceResources, MachineResources, detect, plan_instances
from shipyard.contract.layout import SANDBOX_BASE
from shipyard.runtime.config import AgentConfig, ChannelSource
from shipyard.runtime.control import CONTROL_FILE, ControlChannel
from shipyard.storage.uri import join

if TYPE_CHECKING:
    from shipyard.spec.job import JobSpec


@dataclass(frozen=True)
class InstancePlan:
    host: str
    argv: list[str]            # exactly what is executed for this instance
    config: AgentConfig
    instance_dir: Path
    sandbox_problem: str | None
    # A job kept warm (keep_alive_period_in_seconds): argv boots the warm sandbox (runtime/warm.py), and
    # these are the job's own mounts and environment, which it makes in its namespace; "dir" is the
    # warm process's directory in the pool named after the job (backends/pool.py).
    warm: dict | None = None

    def to_dict(self) -> dict:
        return {"host": self.host, "argv": self.argv, "config": dataclasses.asdict(self.config),
                "instance_dir": str(self.instance_dir), "sandbox_problem": self.sandbox_problem, "warm": self.warm}

    @classmethod
    def from_dict(cls, data: dict) -> InstancePlan:
        return cls(data["host"], data["argv"], AgentConfig.from_dict(data["config"]),
                   Path(data["instance_dir"]), data["sandbox_problem"], data.get("warm"))

    @property
    def config_path(self) -> Path:
        return self.instance_dir / "agent.json"

    @property
    def hosts_path(self) -> Path:
        return self.instance_dir / "hosts"

    @property
    def ml_dir(self) -> Path:
        return self.instance_dir / "ml"


class Instance:
    """A started instance: the sandbox (or agent) process and everything it started."""

    def __init__(self, plan: InstancePlan, process: subprocess.Popen) -> None:
        self.plan, self.process = plan, process
        self.control = ControlChannel(plan.instance_dir / CONTROL_FILE)

    @property
    def host(self) -> str:
        return self.plan.host

    @property
    def location(self) -> str:
        return f"pid {self.process.pid}"

    waiting_for = None   # the job waited for this machine's capacity before its instances started
    lost_reason = None   # the machine running it is the controller's own

    def poll(self) -> int | None:
        return self.process.poll()

    def _tree(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def terminate(self) -> None:
        """The notice: SIGTERM to the instance's agent only, as a container's stop signals its first
        process (bubblewrap's own would tear the sandbox down at once). The agent passes it to the entry
        point, a launcher to its ranks: each gets it once, where one from here too would run a script's
        handler a second time, mid-save."""
        if self.plan.sandbox_problem is not None:   # no sandbox: the agent is the process started
            if self.poll() is None:
                self.process.send_signal(signal.SIGTERM)
            return
        tree, told = self._tree(), 0
        for proc in tree:
            try:
                if proc.name() != "bwrap" and proc.parent().name() == "bwrap":
                    proc.send_signal(signal.SIGTERM)
                    told += 1
            except (psutil.NoSuchProcess, AttributeError):   # gone, or its parent is
                pass
        if not told and self.poll() is None:   # in the controller's log: a notice that reached nobody
            print(f"{self.host}: no agent found for the notice among {[p.pid for p in tree]}", file=sys.stderr,
                  flush=True)

    def kill(self) -> None:
        procs = [*self._tree()]
        try:
            procs.append(psutil.Process(self.process.pid))
        except psutil.NoSuchProcess:
            pass
        for proc in procs:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        self.process.wait()


class LocalBackend:
    name = "local"
    plan_type = InstancePlan
    queued = True   # instances share this machine: a job waits until they fit beside the others'

    def __init__(self, job_dir: Path, pools_dir: Path | None = None) -> None:
        self.job_dir = job_dir
        # Warm pools' directories (backends/pool.py): SHIPYARD_HOME/pools, or beside the jobs on a Ray node.
        self.pools_dir = pools_dir or job_dir.parent.parent / pool.POOLS_DIR

    def instance_resources(self, spec: JobSpec, machine: MachineResources | None) -> list[InstanceResources]:
        """Instances share this machine: sized types must fit side by side (backends/resources.py)."""
        from shipyard.spec.catalog import get_instance_type

        return plan_instances([(get_instance_type(g["instance_type"]), len(g["hosts"])) for g in spec.groups],
                              machine or detect(), spec.oversubscribe)

    def plan(self, spec: JobSpec, resources: list, master_port: int, attempt: int = 1) -> list[InstancePlan]:
        """Pure: what would run for every instance, given the resources each gets. Every attempt gets
        fresh instances (a restarted instance starts from scratch, its checkpoints restored)."""
        # Here, not at the top: a controller starting a planned job needs neither (nor pydantic).
        from shipyard.runtime.debugger.agent import agent_settings as debugger_settings
        from shipyard.runtime.tensorboard import agent_settings as tensorboard_settings
        from shipyard.spec.profiler import agent_settings

        problem = sandbox.bwrap_problem()
        machine = sandbox.machine() if problem is None else None
        hosts, groups = spec.hosts, spec.groups
        addresses = {host: sandbox.host_address(i) for i, host in enumerate(hosts, start=1)}
        # instance_resources' order: the groups', each host numbered in it.
        shares = dict(zip([host for group in groups for host in group["hosts"]], resources, strict=True))
        plans = []
        for host in hosts:
            res, group = shares[host], spec.group_of(host)
            suffix = "" if attempt == 1 else f"-{attempt}"
            instance_dir = self.job_dir / "instances" / f"{host}{suffix}"
            config = AgentConfig(
                job_name=spec.job_name,
                host=host,
                hosts=tuple(hosts),
                base=str(SANDBOX_BASE if problem is None else instance_dir / "ml"),
                instance_dir=str(instance_dir),
                log_path=str(self.job_dir / "logs" / f"{host}.log"),
                events_path=str(self.job_dir / "events" / f"{host}{suffix}.jsonl"),
                hyperparameters=spec.hyperparameters,
                channels=tuple(ChannelSource.of(c) for c in spec.channels
                               if not c.instance_groups or group["instance_group_name"] in c.instance_groups),
                num_cpus=res.vcpus,
                gpu_ids=tuple(res.gpus),
                master_port=master_port,
                host_addresses=addresses,
                sandboxed=problem is None,
                environment=spec.environment,
                instance_type=group["instance_type"],
                instance_groups=tuple(groups) if spec.instance_groups else (),
                checkpoint_uri=spec.checkpoint_s3_uri,
                checkpoint_local_path=spec.checkpoint_local_path,
                model_dir=_local_model_dir(spec),
                heartbeat_dir=str(self.job_dir / "heartbeats" / f"{host}{suffix}") if spec.hang_timeout_seconds else None,
                debugger=debugger_settings(spec),
                profiler=agent_settings(spec.profiler_config, spec.output_path, spec.job_name),
                output_prefix=join(spec.output_path, spec.job_name),
                tensorboard=tensorboard_settings(spec),
                algorithm=spec.algorithm,
            )
            argv = [sys.executable, "-m", "shipyard.runtime.agent", str(instance_dir / "agent.json")]
            warm = None
            if problem is None and spec.keep_alive_period_in_seconds and attempt == 1:
                directory = self.pools_dir / spec.job_name / host
                warm = {"dir": str(directory), "env": sandbox.instance_environment(machine),
                        "mounts": sandbox.instance_mounts(config, job_dir=self.job_dir, hosts=instance_dir / "hosts",
                                                          machine=machine)}
                argv = sandbox.warm_wrap(pool.warm_argv(directory, spec.framework), host, pool_dir=directory,
                                         machine=machine)
            elif problem is None:
                argv = sandbox.wrap(argv, config, job_dir=self.job_dir, hosts=instance_dir / "hosts",
                                    machine=machine)
            plans.append(InstancePlan(host, argv, config, instance_dir, problem, warm))
        return plans

    def prepare(self, plan: InstancePlan) -> None:
        plan.ml_dir.mkdir(parents=True, exist_ok=True)
        for path in (plan.config.log_path, plan.config.events_path):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        plan.hosts_path.write_text(sandbox.hosts_file(plan.config.host_addresses))
        if plan.sandbox_problem is None:
            sandbox.make_writable(plan.config, self.job_dir)
        plan.config.write(plan.config_path)

    def start(self, plan: InstancePlan) -> Instance | pool.WarmInstance:
        if plan.warm is not None:
            return pool.start(plan)
        return self._start_cold(plan)

    def rejoin(self, kept: list, master_port: int) -> None:
        """Hosts keep their loopback addresses here: the port is the news."""
        for instance in kept:
            instance.control.send("resume", master_port=master_port)

    def needs_new_process(self) -> str | None:
        return None

    def upload_artifacts(self, instances: list, output: str, progress) -> dict:
        """Each tarball made here of the instances' directories, then uploaded."""
        from shipyard.storage import archive, transfer

        uploaded = {}
        for name, subdir in archive.ARTIFACTS.items():
            tarball = self.job_dir / "artifacts" / name
            files = archive.make_tarball(tarball, [i.plan.ml_dir / subdir for i in instances])
            transfer.upload_file(tarball, join(output, name), progress=progress(name))
            uploaded[name] = (files, tarball.stat().st_size)
        return uploaded

    def attach(self, plan: InstancePlan, warm_pool: str, connection: int | None = None) -> pool.WarmInstance:
        """Run the instance on the warm process pool `warm_pool` (store/pools.py) has for its host, or
        adopt the `connection` on which another process sent it there."""
        directory = self.pools_dir / warm_pool / plan.host
        if connection is not None:
            return pool.adopt(plan, directory, connection)
        return pool.attach(plan, directory)

    def _start_cold(self, plan: InstancePlan) -> Instance:
        log_fd = os.open(plan.config.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            process = subprocess.Popen(
                plan.argv, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd,
                start_new_session=True, preexec_fn=None if plan.sandbox_problem is None else _die_with_parent,
            )
        finally:
            os.close(log_fd)
        return Instance(plan, process)


def _local_model_dir(spec: JobSpec) -> str | None:
    """A TensorFlow job's model_dir (frameworks.TensorFlow) when it is an absolute path of this machine."""
    from shipyard.contract.hyperparameters import decode

    value = decode(spec.hyperparameters).get("model_dir") if spec.framework == "tensorflow" else None
    return value if isinstance(value, str) and value.startswith("/") else None


def _die_with_parent() -> None:
    """Without a sandbox, PR_SET_PDEATHSIG does what bwrap's --die-with-parent does."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
