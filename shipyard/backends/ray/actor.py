"""The node's side of a Ray instance: an actor that runs the same instance agent as the local backend,
in the same sandbox, through the local backend's own prepare() and start(), with files on its node.

The class is plain Python (ray.remote wraps it where it is used, so importing this module does not
import Ray). Nodes need shipyard installed in the Python that runs their Ray workers."""

from __future__ import annotations

import dataclasses
import os
import shutil
import threading
from pathlib import Path

from shipyard.backends.ray import reaper, streams

# Never handed to the agent: these describe the actor's own Ray worker, not the instance.
_RAY_ONLY = ("RAY_", "OMP_NUM_THREADS")


def interface_of(address: str) -> str:
    """The name of this node's network interface that holds `address` (what SM_NETWORK_INTERFACE_NAME
    and NCCL/GLOO_SOCKET_IFNAME name on this host)."""
    import socket

    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == address for a in addresses):
            return name
    raise RuntimeError(f"no network interface of this node holds its Ray address {address}; start the node "
                       "with `ray start --node-ip-address` set to one of its own addresses")


def subnet_of(address: str) -> str:
    """The network (CIDR) of this node's interface that holds `address`: what OpenMPI's *_if_include take
    alike on every host of the cluster, whose interface names may differ."""
    import ipaddress
    import socket

    import psutil

    netmask = next(a.netmask for a in psutil.net_if_addrs()[interface_of(address)]
                   if a.family == socket.AF_INET and a.address == address)
    return str(ipaddress.ip_interface(f"{address}/{netmask}").network)


class InstanceActor:
    def __init__(self) -> None:
        self.instance = None
        self.plan = None
        self.log_start = 0
        self.beats_seen: dict[str, int] = {}
        # Calls run in threads: a terminate or kill that comes while start() runs waits for it, and
        # one that comes before it is kept (`stop`) and done as soon as the instance is started.
        self.lock = threading.Lock()
        self.stop: str | None = None
        self.sandbox = None       # the sandbox process this actor started (a warm pool's outlives its job)
        self.warm_dir: Path | None = None

    def start(self, plan: dict, host_addresses: dict[str, str], environment: dict[str, str],
              cpus_from_node: bool, master_port: int) -> dict:
        """Lay out and start the instance; returns where it runs."""
        with self.lock:
            where = self._start(plan, host_addresses, environment, cpus_from_node, master_port)
            if self.stop is not None:
                getattr(self.instance, self.stop)()
            return where

    def run_next(self, plan: dict, host_addresses: dict[str, str], environment: dict[str, str],
                 cpus_from_node: bool, master_port: int) -> dict:
        """A warm pool's actor: run the next job's instance on the warm process this actor kept."""
        with self.lock:
            self.stop, self.beats_seen = None, {}
            return self._start(plan, host_addresses, environment, cpus_from_node, master_port, reuse=True)

    def free_port(self, span: int) -> int:
        """The job's rendezvous ports, found free on this node (algo-1's), where they will be bound."""
        from shipyard.runtime.ports import free_port

        return free_port(span)

    def detach(self) -> None:
        """The job is over and its pool kept: the warm process waits for the next job."""
        self.instance.detach()

    def alive(self) -> bool:
        return self.sandbox is not None and self.sandbox.poll() is None

    def _start(self, plan: dict, host_addresses: dict[str, str], environment: dict[str, str],
               cpus_from_node: bool, master_port: int, reuse: bool = False) -> dict:
        import ray

        from shipyard.backends import resources, sandbox
        from shipyard.backends.local import InstancePlan, LocalBackend

        node_plan = InstancePlan.from_dict(plan)
        if node_plan.sandbox_problem is None:
            problem = sandbox.bwrap_problem()
            if problem is not None:
                raise RuntimeError(f"this node cannot make the instance sandbox: {problem}; install bubblewrap "
                                   "on every node, or submit with SHIPYARD_SANDBOX=off")
        config = dataclasses.replace(
            node_plan.config,
            host_addresses=host_addresses,
            master_port=master_port,
            network_interface=interface_of(host_addresses[node_plan.host]),
            network_subnet=subnet_of(host_addresses[node_plan.host]),
            gpu_ids=tuple(str(g) for g in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])),
            num_cpus=resources.detect().vcpus if cpus_from_node else node_plan.config.num_cpus,
        )
        self.plan = dataclasses.replace(node_plan, config=config)
        for key in [k for k in os.environ if k.startswith(_RAY_ONLY)]:
            del os.environ[key]
        os.environ.update(environment)   # the agent inherits this process's environment
        if node_plan.sandbox_problem is not None:
            # Nothing else would stop the script should this actor die unasked (backends/ray/reaper.py). The
            # reaper starts before the mark is set: it must not carry it itself.
            mark = ray.get_runtime_context().get_actor_id()
            reaper.start(os.getpid(), mark)
            os.environ[reaper.MARK] = mark
        backend = LocalBackend(Path(config.instance_dir).parent.parent)
        backend.prepare(self.plan)
        # The host log is shared by a host's attempts; this instance's part starts here.
        self.log_start = os.path.getsize(config.log_path) if os.path.exists(config.log_path) else 0
        if reuse:
            from shipyard.backends import pool

            self.instance = pool.attach(self.plan, self.warm_dir)
        else:
            self.instance = backend.start(self.plan)
            self.sandbox = getattr(self.instance, "process", None)
            self.warm_dir = Path(node_plan.warm["dir"]) if node_plan.warm else None
        return {"node_id": ray.get_runtime_context().get_node_id(), "address": ray.util.get_node_ip_address(),
                "pid": self.sandbox.pid if self.sandbox is not None else None}

    def pull(self, log_offset: int, events_offset: int) -> dict:
        """What was added since the offsets, and the agent's exit code once it has exited (read first,
        so the bytes returned with a code are all there will be)."""
        code = self.instance.poll()
        config = self.plan.config
        log = streams.read_from(config.log_path, self.log_start + log_offset)
        events = streams.read_from(config.events_path, events_offset)
        beats = streams.changed_files(config.heartbeat_dir, self.beats_seen)
        more = len(log) == streams.PULL_LIMIT or len(events) == streams.PULL_LIMIT
        return {"code": code, "log": log, "events": events, "heartbeats": beats, "more": more}

    def share_artifacts(self, uri: str) -> dict:
        """The instance's shares of the job's tarballs, uploaded from here, and ml/output's own files."""
        return {"shares": streams.share_artifacts(self.plan.ml_dir, uri, self.plan.config.log_path),
                "output_files": streams.pack_output_files(self.plan.ml_dir)}

    def terminate(self) -> None:
        self._stop("terminate")

    def kill(self) -> None:
        self._stop("kill")

    def _stop(self, how: str) -> None:
        with self.lock:
            if self.instance is None:
                self.stop = how
            else:
                getattr(self.instance, how)()

    def control(self, action: str, fields: dict) -> None:
        if "host_addresses" in fields:   # a survivor rejoining replacements placed on other nodes
            self._readdress(fields["host_addresses"])
        self.instance.control.send(action, **fields)

    def _readdress(self, host_addresses: dict[str, str]) -> None:
        """Every algo-* resolves to where it now is: the sandbox's /etc/hosts is rewritten in place (it is
        bind-mounted, so a new file would not be seen), and the plan follows."""
        from shipyard.backends import sandbox

        config = dataclasses.replace(self.plan.config, host_addresses=host_addresses)
        self.plan = dataclasses.replace(self.plan, config=config)
        with open(self.plan.hosts_path, "r+") as hosts:
            hosts.write(sandbox.hosts_file(host_addresses))
            hosts.truncate()

    def cleanup(self) -> None:
        """The instance is over and its artifacts uploaded: its data and code need not stay on the node."""
        shutil.rmtree(self.plan.instance_dir, ignore_errors=True)
