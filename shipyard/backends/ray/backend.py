"""Instances on a Ray cluster: each instance is a Ray actor on its own node running the same instance
agent as the local backend (`backends/ray/actor.py`), the instances of one start placed together by a
placement group (`backends/ray/placement.py`: the resource mapping and the strategy).

Nothing is assumed shared between the controller's machine and the nodes: the agent keeps its files on
its node and the controller keeps a copy of the host log, events and heartbeats at the paths it reads,
pulled while the instance runs (`backends/ray/streams.py`). The model and output data go from the nodes
to storage, never through the controller: each node uploads its share of each tarball when its agent
exits, and the controller assembles the tarballs from the shares in storage (storage/archive.py). The
job's code, channels and checkpoints are read by the nodes themselves, so those URIs must be reachable
from every node: `file://` ones are refused unless SHIPYARD_RAY_SHARED_STORAGE=1 says they are on shared
storage.

A job that needs more than the cluster has is not an error: its instances wait (`waiting_for`, shown as
the Pending status) until the placement group is placed or the job is stopped."""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard import settings
from shipyard.backends.ray import placement as ray_placement
from shipyard.backends.local import InstancePlan as NodePlan
from shipyard.backends.local import LocalBackend
from shipyard.backends.pool import POOLS_DIR
from shipyard.backends.ray.streams import Mirror
from shipyard.errors import ValidationError
from shipyard.runtime.config import AgentConfig

if TYPE_CHECKING:
    from shipyard.spec.job import JobSpec

PULL_SECONDS = 0.2          # how often a running instance's new log lines and events are fetched
CALL_TIMEOUT_SECONDS = 60.0  # a node that does not answer a call in this long is treated as unreachable
WAIT_POLL_SECONDS = 1.0      # how often a waiting placement group is checked (and its message renewed)
LOST_EXIT_CODE = 137         # what poll() says for an instance whose node or actor died
CLUSTER_CHECK_SECONDS = 1.0  # how often running instances ask whether their cluster's head is still there
# A head that does not answer this long is lost: Ray ends a driver (the controller) whose head is away for
# 60 s (gcs_rpc_server_reconnect_timeout_s), and the job must end in a true state before that.
HEAD_LOST_SECONDS = 20.0
POOL_ACTOR_PREFIX = "shipyard-pool:"   # a warm pool's placement group and actors: PREFIX + pool [+ ":" + host]
# What the host log says when an actor call raised on the node, by call.
FAILED_CALLS = {"start": "could not start", "pull": "could not read the logs and events of",
                "collect": "could not upload the model and output of"}
SHARES_DIR = ".shipyard-shares"   # under the job's output: the nodes' shares of its tarballs, until assembled


@dataclass(frozen=True)
class RayInstancePlan:
    """One instance: `node` is exactly what its actor runs on the node (the local backend's plan with
    paths under the node's directory; `host_addresses` become the nodes' addresses once placed), `config`
    the same agent configuration with the controller's paths, where the streams are copied to."""

    host: str
    node: NodePlan
    config: AgentConfig
    instance_dir: Path
    bundle: dict[str, float]
    strategy: str
    address: str
    cpus_from_node: bool       # an unsized type reports the node's CPUs (SM_NUM_CPUS), as locally
    shares_uri: str            # where the node uploads its shares of the job's tarballs

    @property
    def argv(self) -> list[str]:
        return self.node.argv

    @property
    def sandbox_problem(self) -> str | None:
        return self.node.sandbox_problem

    @property
    def warm(self) -> dict | None:
        return self.node.warm

    @property
    def ml_dir(self) -> Path:
        return self.instance_dir / "ml"

    def to_dict(self) -> dict:
        return {"host": self.host, "node": self.node.to_dict(), "config": dataclasses.asdict(self.config),
                "instance_dir": str(self.instance_dir), "bundle": self.bundle, "strategy": self.strategy,
                "address": self.address, "cpus_from_node": self.cpus_from_node, "shares_uri": self.shares_uri}

    @classmethod
    def from_dict(cls, data: dict) -> RayInstancePlan:
        return cls(data["host"], NodePlan.from_dict(data["node"]), AgentConfig.from_dict(data["config"]),
                   Path(data["instance_dir"]), data["bundle"], data["strategy"], data["address"],
                   data["cpus_from_node"], data["shares_uri"])


def node_job_dir(job_dir: Path, job_name: str) -> Path:
    """The job's directory on every node: under SHIPYARD_RAY_NODE_DIR, unique per SHIPYARD_HOME."""
    digest = hashlib.sha256(str(job_dir.resolve()).encode()).hexdigest()[:8]
    return Path(settings.ray_node_dir()) / f"{job_name}-{digest}"


def placeholder_address(host: str) -> str:
    """What a plan says for a host's address before placement decides its node."""
    return f"node-of-{host}"


class RayBackend:
    name = "ray"
    plan_type = RayInstancePlan
    queued = False  # Ray queues the placement groups itself

    def __init__(self, job_dir: Path) -> None:
        self.job_dir = job_dir
        self._placement: Placement | None = None

    def instance_resources(self, spec: JobSpec, machine=None) -> list:
        """Each instance's share, from the resource mapping (the submitting machine's size is irrelevant)."""
        from shipyard.backends.resources import InstanceResources
        from shipyard.spec.catalog import get_instance_type

        return [InstanceResources(vcpus=int(ray_placement.bundle(get_instance_type(group["instance_type"]))["CPU"]),
                                  memory_gib=None, gpus=()) for group in spec.groups for _ in group["hosts"]]

    def plan(self, spec: JobSpec, resources: list, master_port: int, attempt: int = 1) -> list[RayInstancePlan]:
        """Pure: the node's plan and the controller's copy of it for every instance, and its bundle."""
        from shipyard.spec.catalog import get_instance_type
        from shipyard.storage.uri import join

        _check_reachable_from_nodes(spec)
        shares = join(spec.output_path, spec.job_name, "output", SHARES_DIR, f"attempt-{attempt}")
        strategy = ray_placement.strategy(settings.ray_pack())
        placeholders = {host: placeholder_address(host) for host in spec.hosts}
        node_dir = node_job_dir(self.job_dir, spec.job_name)
        nodes = LocalBackend(node_dir, pools_dir=node_dir.parent / POOLS_DIR).plan(spec, resources, master_port,
                                                                                   attempt)
        mirrors = LocalBackend(self.job_dir).plan(spec, resources, master_port, attempt)
        plans = []
        for node, mirror in zip(nodes, mirrors, strict=True):
            node = dataclasses.replace(node, config=dataclasses.replace(node.config, host_addresses=placeholders))
            config = dataclasses.replace(mirror.config, host_addresses=placeholders)
            instance_type = get_instance_type(config.instance_type)   # its group's
            plans.append(RayInstancePlan(node.host, node, config, mirror.instance_dir,
                                         ray_placement.bundle(instance_type), strategy, settings.ray_address(),
                                         instance_type.vcpus is None, join(shares, node.host)))
        return plans

    def prepare(self, plan: RayInstancePlan) -> None:
        """Only the controller's side: the node's side is laid out by its actor."""
        plan.ml_dir.mkdir(parents=True, exist_ok=True)
        for path in (plan.config.log_path, plan.config.events_path):
            Path(path).parent.mkdir(parents=True, exist_ok=True)

    def start(self, plan: RayInstancePlan) -> RayInstance:
        """Instances started by one backend are placed together, when the first of them is polled (by
        then the controller has started them all). A warm job's actors are named after its pool, so the
        jobs that reuse it find them."""
        if self._placement is None:
            name = (f"{POOL_ACTOR_PREFIX}{self.job_dir.name}" if plan.node.warm
                    else f"shipyard:{self.job_dir.name}:{time.time():.0f}")
            self._placement = Placement(plan.address, plan.strategy, name)
        instance = RayInstance(plan, self._placement)
        self._placement.members.append(instance)
        return instance

    def rejoin(self, kept: list, master_port: int) -> None:
        """Survivors learn the replacements' nodes and the port only once those are placed: the placement
        tells them then."""
        self._placement.adopt(kept)

    def needs_new_process(self) -> str | None:
        """The cluster this process was connected to is gone (cluster_lost)."""
        return cluster_lost(self._placement.address) if self._placement is not None else None

    def upload_artifacts(self, instances: list, output: str, progress) -> dict:
        """Each tarball assembled in storage from the shares the instances' nodes uploaded, in host order.
        Where hosts' names clash (SageMaker says they must not), the later host's file is kept and the
        others left out, as for a local job: that tarball is then rewritten through here (streamed)."""
        from shipyard.storage import archive, transfer
        from shipyard.storage.uri import filesystem, join, remove_tree

        uploaded = {}
        for name in archive.ARTIFACTS:
            shares = [i.shares[name] for i in instances if name in i.shares]
            target = join(output, name)
            end = archive.gzip_end([(share["crc"], share["length"]) for share in shares])
            # The first share whole (its gzip header is the tarball's), the others' deflate data only.
            pieces = ([shares[0]["uri"], *((share["uri"], archive.SHARE_DATA) for share in shares[1:])] if shares
                      else [archive.GZIP_HEAD])
            size = transfer.concatenate([*pieces, end], target, progress(name))
            names = [share["names"] for share in shares]
            files = sum(map(len, archive.winners(names)))
            if files < sum(map(len, names)):
                fs, path = filesystem(target)
                tarball = self.job_dir / "artifacts" / name
                with fs.open(path, "rb") as merged:
                    archive.keep_winners(merged, names, tarball)
                transfer.upload_file(tarball, target, progress=progress(name))
                size = tarball.stat().st_size
            uploaded[name] = (files, size)
        remove_tree(join(output, SHARES_DIR))
        return uploaded

    def attach(self, plan: RayInstancePlan, warm_pool: str, connection: int | None = None) -> RayInstance:
        """Run the instance on the actor `warm_pool` kept on its host's node (its placement stays the
        pool's, held by the pool's keeper)."""
        from shipyard.store import Store
        from shipyard.store.pools import PoolStore

        members = PoolStore(Store(self.job_dir.parent.parent)).get(warm_pool).members
        instance = RayInstance(plan, Placement(plan.address, plan.strategy, f"{POOL_ACTOR_PREFIX}{warm_pool}"))
        instance.placement.members.append(instance)
        instance.placement.reuse({host: member["address"] for host, member in members.items()
                                  if host in plan.config.hosts})
        return instance


def _check_reachable_from_nodes(spec: JobSpec) -> None:
    if settings.ray_shared_storage():
        return
    uris = [("output_path", spec.output_path)] + ([("source", spec.source_uri)] if spec.algorithm is None else [])
    uris += [(f"channel {c.name}", c.uri) for c in spec.channels]
    if spec.checkpoint_s3_uri:
        uris.append(("checkpoint_s3_uri", spec.checkpoint_s3_uri))
    for field, uri in uris:
        if uri.startswith("file://") or "://" not in uri:
            raise ValidationError(
                field, uri, "Ray nodes cannot see this machine's files (the job's code and data are read, and "
                "its artifacts written, from each node): use s3:// or another store every node reaches, or set "
                "SHIPYARD_RAY_SHARED_STORAGE=1 if this path is on storage every node mounts at the same path")


def _ray():
    import ray

    return ray


_connecting = threading.Lock()
# Ray Client's proxy on the head starts a server process for each client, and now and then that process
# fails to start ("Starting Ray client server failed", seen on a loaded machine); the next connection gets
# a new one.
CLIENT_ATTEMPTS, CLIENT_RETRY_SECONDS = 3, 1.0   # the n-th retry waits n times as long


def connect(address: str) -> None:
    """Once per process; placements (a reused pool's: one per instance) may ask from several threads. A
    connection to a cluster that is gone (cluster_lost) cannot be made again in this process: Ray ends the
    process when its connection is shut down after its head's raylet died."""
    ray = _ray()
    with _connecting:
        if not ray.is_initialized():
            for attempt in range(1, CLIENT_ATTEMPTS + 1):
                try:
                    ray.init(address=address, namespace="shipyard", log_to_driver=False, logging_level="WARNING")
                    break
                except ConnectionAbortedError:   # Ray Client's "Initialization failure from server"
                    if not address.startswith("ray://") or attempt == CLIENT_ATTEMPTS:
                        raise
                    time.sleep(attempt * CLIENT_RETRY_SECONDS)
            _head.update(lost=None, unanswered_since=None, checked=0.0)   # a new connection: to a live head
        elif lost := cluster_lost(address):
            raise RuntimeError(f"{lost}; this controller was connected to the old cluster and cannot connect to "
                               "another: submit the job again to run it on the new one")


# What this process knows of its cluster's head (cluster_lost): every instance's pump asks, one asks Ray.
_head: dict = {"lost": None, "unanswered_since": None, "checked": 0.0}
_checking_head = threading.Lock()
_losing = threading.Lock()   # one pump ends the instances of a cluster that is gone (_cluster_gone)


def cluster_lost(address: str) -> str | None:
    """Why the Ray cluster this process is connected to is gone, or None while it is there. Without GCS
    fault tolerance (an external Redis) the head's GCS is the cluster's state: a head restarted is a new
    cluster, which refuses our cluster ID and has none of our nodes, actors or placement groups; a head that
    does not answer for HEAD_LOST_SECONDS is lost too. Asked of Ray at most every CLUSTER_CHECK_SECONDS
    (its own liveness check); once lost, lost for the rest of the process."""
    ray = _ray()
    with _checking_head:
        if _head["lost"] or time.monotonic() - _head["checked"] < CLUSTER_CHECK_SECONDS:
            return _head["lost"]
        try:
            ray._private.worker.global_worker.gcs_client.check_alive([], timeout=CLUSTER_CHECK_SECONDS)
            _head["unanswered_since"] = None
        except ray.exceptions.AuthenticationError:   # WrongClusterID: the GCS there is a new one
            _head["lost"] = (f"the Ray cluster's head at {address} was restarted, and the cluster's state with it "
                             "(without GCS fault tolerance its nodes, actors and placement groups are gone)")
        except Exception as exc:
            _head["unanswered_since"] = _head["unanswered_since"] or time.monotonic()
            if time.monotonic() - _head["unanswered_since"] >= HEAD_LOST_SECONDS:
                _head["lost"] = (f"the Ray cluster's head at {address} did not answer for {HEAD_LOST_SECONDS:g}s "
                                 f"({type(exc).__name__}: {exc})")
        _head["checked"] = time.monotonic()
        return _head["lost"]


class Placement:
    """One placement group for the instances started together; it lives until all of them are over. The
    replacement of a lost instance takes the lost one's bundle of its group (Ray has moved the bundle to
    a live node by then; a new group could not have it, and the old one must stay for the survivors)."""

    def __init__(self, address: str, strategy: str, name: str) -> None:
        self.address, self.strategy, self.name = address, strategy, name
        self.members: list[RayInstance] = []
        self.waiting: str | None = None
        self.group = None
        self.cancelled = False
        self._started = False
        self._lock = threading.Lock()
        self._released: set[str] = set()
        self.reused: dict[str, str] | None = None
        self.kept: list[RayInstance] = []   # survivors of the last attempt, running elsewhere, that rejoin
        self.bundles: dict[str, int] = {}   # each host's bundle in the group

    def adopt(self, kept: list[RayInstance]) -> None:
        """The members replace lost instances of the placement `kept` were started by: they run in the lost
        ones' bundles of its group, which this placement owns from now on (removed when the members and the
        survivors are all over)."""
        self.kept = list(kept)
        old = kept[0].placement
        if old.group is not None and old.reused is None:
            self.group, self.bundles, old.group = old.group, old.bundles, None
        for survivor in kept:
            survivor.placement = self

    def launch(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._place, name="shipyard-ray-placement", daemon=True).start()

    def reuse(self, addresses: dict[str, str]) -> None:
        """Instead of placing: the warm pool's actors, on nodes at `addresses`, run the members' job."""
        self.reused = addresses

    def _place(self) -> None:
        ray = _ray()
        from ray.util.placement_group import placement_group, placement_group_table

        try:
            connect(self.address)
            reuse = self.reused is not None
            if reuse:
                placed = {host: (None, address) for host, address in self.reused.items()}
            elif self.group is not None:
                placed = self._replaced_bundles()
                if placed is None:
                    return
            else:
                bundles = [m.plan.bundle for m in self.members]
                self.group = placement_group(bundles, strategy=self.strategy, name=self.name)
                ready = self.group.ready()
                while not ray.wait([ready], timeout=WAIT_POLL_SECONDS)[0]:
                    if self.cancelled:
                        ray.util.remove_placement_group(self.group)
                        return
                    self.waiting = ray_placement.waiting_message(bundles, self.strategy, ray.nodes())
                nodes = placement_group_table(self.group)["bundles_to_node_id"]
                addresses = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
                placed = {m.host: (nodes[i], addresses[nodes[i]]) for i, m in enumerate(self.members)}
                self.bundles = {m.host: i for i, m in enumerate(self.members)}
                self.waiting = None
            # Every actor first, so that the rendezvous port is chosen on algo-1's node, where it is bound.
            for index, member in enumerate(self.members):
                member._make_actor(self.group, self.bundles.get(member.host, index), placed, reuse)
            hosts = {**{k.host: k.node_address for k in self.kept},
                     **{host: address for host, (_, address) in placed.items()}}
            port = self._rendezvous_port()
            for member in self.members:
                member._start(hosts, port, reuse)
            for survivor in self.kept:
                survivor.control.send("resume", master_port=port, host_addresses=hosts)
        except Exception as exc:  # no cluster, or it went away: every instance fails, saying why
            self.waiting = None
            for member in self.members:
                member._fail(f"could not place the instance on the Ray cluster at {self.address!r}: "
                             f"{type(exc).__name__}: {exc}")

    def _replaced_bundles(self) -> dict[str, tuple[str, str]] | None:
        """Once Ray has moved the lost instances' bundles to live nodes: each member's (node, address); None
        when stopped meanwhile."""
        ray = _ray()
        from ray.util.placement_group import placement_group_table

        bundles = [m.plan.bundle for m in self.members]
        while True:
            table = placement_group_table(self.group)
            alive = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
            nodes = table["bundles_to_node_id"]
            if table["state"] == "CREATED" and all(nodes.get(self.bundles[m.host]) in alive for m in self.members):
                self.waiting = None
                return {m.host: (nodes[self.bundles[m.host]], alive[nodes[self.bundles[m.host]]])
                        for m in self.members}
            if self.cancelled:
                return None
            self.waiting = ray_placement.waiting_message(bundles, self.strategy, ray.nodes())
            time.sleep(WAIT_POLL_SECONDS)

    def _rendezvous_port(self) -> int:
        """Free ports on algo-1's node (its actor looks), for the span the job's launchers take; the
        planned one when algo-1 has no actor (stopped before it was made)."""
        from shipyard.runtime.launchers.tf_config import port_span

        plan = self.members[0].plan.config
        first = {i.host: i for i in [*self.kept, *self.members]}.get(plan.hosts[0])
        if first is None or first.actor is None:
            return plan.master_port
        return _ray().get(first.actor.free_port.remote(port_span(len(plan.hosts))), timeout=CALL_TIMEOUT_SECONDS)

    def release(self, host: str) -> None:
        """An instance is over; the group goes when all are (removing it would kill the others). A
        reused pool's group is its keeper's to remove."""
        if self.reused is not None:
            return
        with self._lock:
            self._released.add(host)
            done = self._released >= {i.host for i in [*self.members, *self.kept]}
        if done and self.group is not None and not cluster_lost(self.address):   # gone with its cluster
            try:
                _ray().util.remove_placement_group(self.group)
            except Exception:
                pass  # the cluster is gone: so is the group


class RemoteControl:
    """ControlChannel's `send`, delivered to the instance's node."""

    def __init__(self, instance: RayInstance) -> None:
        self.instance = instance

    def send(self, action: str, **fields: object) -> None:
        if self.instance.actor is not None:
            _ray().get(self.instance.actor.control.remote(action, fields), timeout=CALL_TIMEOUT_SECONDS)


class RayInstance:
    """The controller's handle on one instance: polls report the agent's exit once its streams and
    artifacts are copied, or LOST_EXIT_CODE with `lost_reason` when its node or actor died."""

    def __init__(self, plan: RayInstancePlan, placement: Placement) -> None:
        self.plan, self.placement = plan, placement
        self.control = RemoteControl(self)
        self.mirror = Mirror(plan.config.log_path, plan.config.events_path, plan.config.heartbeat_dir, plan.ml_dir)
        self.actor = None
        self.node_id: str | None = None
        self.node_address: str | None = None
        self.pid: int | None = None
        self.lost_reason: str | None = None
        self.shares: dict[str, dict] = {}   # its node's shares of the job's tarballs, once uploaded
        self._code: int | None = None
        self._pump: threading.Thread | None = None
        self._finishing = threading.Lock()

    @property
    def host(self) -> str:
        return self.plan.host

    @property
    def location(self) -> str:
        if self.node_id is None:
            return "not placed yet"
        return f"node {self.node_id[:12]} ({self.node_address}), pid {self.pid}"

    @property
    def waiting_for(self) -> str | None:
        """Why this instance has not started yet (waiting for capacity), or None."""
        self.placement.launch()
        return self.placement.waiting if self.actor is None and self._code is None else None

    def poll(self) -> int | None:
        self.placement.launch()
        return self._code

    # -- started by the placement ---------------------------------------------------------------
    def _make_actor(self, group, index: int, placed: dict[str, tuple[str, str]], reuse: bool) -> None:
        """The actor in bundle `index` of `group`, or (`reuse`) the warm pool's actor for this host."""
        # Under the lock that _finish takes: a terminate() or kill() either comes first and no actor is
        # made, or finds the actor and stops it (an actor made after _finish would run unwatched).
        name = f"{self.placement.name}:{self.host}"
        with self._finishing:
            if self._code is None and not self.placement.cancelled:
                self.node_id, self.node_address = placed[self.host]
                self.actor = _pool_actor(name) if reuse else _new_actor(self.plan.bundle, group, index, name)

    def _start(self, hosts: dict[str, str], master_port: int, reuse: bool) -> None:
        """Start the instance on its actor (a warm pool's: run it there), `hosts` every host's node address."""
        ray = _ray()
        if self.actor is None:
            self._finish(143)
            return
        environment = settings.forwarded()
        call = self.actor.run_next if reuse else self.actor.start
        try:
            where = ray.get(call.remote(self.plan.node.to_dict(), hosts, environment, self.plan.cpus_from_node,
                                        master_port), timeout=CALL_TIMEOUT_SECONDS)
        except Exception as exc:
            self._gone(exc, "start")
            return
        if reuse:   # the pool record knew the node's address, not its id
            self.node_id = where["node_id"]
        self.pid = where["pid"]
        self.mirror.note(f"{self.host} started on {self.location}")
        pump = threading.Thread(target=self._pull_until_exit, name=f"shipyard-ray-{self.host}", daemon=True)
        pump.start()
        self._pump = pump  # published once started: a kill() in between must not join an unstarted thread

    def _pull_until_exit(self) -> None:
        ray = _ray()
        unanswered_since: float | None = None
        while self._code is None:
            # Calls to the actor go to its node directly, and answer for a while after the head is gone.
            if lost := cluster_lost(self.placement.address):
                self._cluster_gone(lost)
                return
            try:
                chunk = ray.get(self.actor.pull.remote(*self.mirror.offsets()), timeout=CALL_TIMEOUT_SECONDS)
            except ray.exceptions.ActorUnavailableError as exc:
                # Transient (a network problem; the actor is still there) unless it lasts.
                unanswered_since = unanswered_since or time.monotonic()
                if time.monotonic() - unanswered_since >= CALL_TIMEOUT_SECONDS:
                    self._gone(exc, "pull")
                    return
                time.sleep(PULL_SECONDS)
                continue
            except Exception as exc:
                self._gone(exc, "pull")
                return
            unanswered_since = None
            self.mirror.apply(chunk["log"], chunk["events"], chunk["heartbeats"])
            if chunk["more"]:
                continue
            if chunk["code"] is not None:
                self._collect(chunk["code"])
                return
            time.sleep(PULL_SECONDS)

    def _collect(self, code: int) -> None:
        """The node uploads the instance's shares of the tarballs (its progress lines pulled as they come)
        and sends ml/output's own files; then its files go."""
        ray = _ray()
        try:
            sharing = self.actor.share_artifacts.remote(self.plan.shares_uri)
            while not ray.wait([sharing], timeout=PULL_SECONDS * 5)[0]:
                self._pull()
            answer = ray.get(sharing)
            self._pull()
            self.mirror.apply_output_files(answer["output_files"])
            self.shares = answer["shares"]
            ray.get(self.actor.cleanup.remote(), timeout=CALL_TIMEOUT_SECONDS)
        except Exception as exc:
            self._gone(exc, "collect")
            return
        self._finish(code)

    def _pull(self) -> None:
        chunk = _ray().get(self.actor.pull.remote(*self.mirror.offsets()), timeout=CALL_TIMEOUT_SECONDS)
        self.mirror.apply(chunk["log"], chunk["events"], chunk["heartbeats"])

    def _gone(self, exc: Exception, call: str) -> None:
        """The actor's `call` (one of FAILED_CALLS) failed: its node died, the actor died or stopped
        answering, or our code on the node raised."""
        ray = _ray()
        if self._code is not None:
            return   # stopped meanwhile: the failure is the stop's doing
        if isinstance(exc, ray.exceptions.RayTaskError):   # an error of ours on the node, not a loss
            self.mirror.note(f"{FAILED_CALLS[call]} {self.host} on {self.location}: {exc.cause if exc.cause else exc}")
            self._finish(1)
            return
        if lost := cluster_lost(self.placement.address):
            self._cluster_gone(lost)
            return
        node = f"node {self.node_id} ({self.node_address})"
        if not _node_alive(self.node_id):
            self.lost_reason = f"{node} died"
        elif isinstance(exc, ray.exceptions.ActorUnavailableError):
            self.lost_reason = f"its Ray actor on {node} did not answer for {CALL_TIMEOUT_SECONDS:g}s"
        else:
            self.lost_reason = (f"its Ray actor on {node} died{' while starting' if call == 'start' else ''}: "
                                f"{type(exc).__name__}")
        self.mirror.note(f"{self.host} lost: {self.lost_reason}")
        self._finish(LOST_EXIT_CODE)

    def _fail(self, message: str) -> None:
        self.mirror.note(message)
        self._finish(1)

    def _cluster_gone(self, reason: str) -> None:
        """The cluster is gone (cluster_lost): so is every instance placed on it. Their processes are killed
        while their actors still answer (the worker nodes run on for a while without their head, then take
        them along when they give up on it), all before any is reported lost, so that none is taken for a
        survivor. Each instance's pump may notice first: one does it."""
        with _losing:
            instances = [i for i in [*self.placement.members, *self.placement.kept] if i._code is None]
            for instance in instances:
                if instance.actor is not None:
                    try:
                        _ray().get(instance.actor.kill.remote(), timeout=CLUSTER_CHECK_SECONDS * 5)
                    except Exception:
                        pass   # its node is gone already, and the instance with it
            for instance in instances:
                instance.lost_reason = reason
                instance.mirror.note(f"{instance.host} lost: {reason}")
                instance._finish(LOST_EXIT_CODE)

    def _finish(self, code: int) -> None:
        with self._finishing:
            if self._code is not None:
                return
            # A warm instance's actor stays for its pool: kept (detach) or ended (release) by the controller.
            # On a cluster that is gone there is nothing to kill, and asking its new head would end this
            # process (Ray's answer to a GCS of another cluster).
            if (self.actor is not None and not (self.plan.node.warm and not self.lost_reason)
                    and not cluster_lost(self.placement.address)):
                try:
                    _ray().kill(self.actor, no_restart=True)
                except Exception:
                    pass
            self._code = code
        if not self.plan.node.warm or self.lost_reason:
            self.placement.release(self.host)

    # -- as a warm pool's member (backends/pool.py has the local one) ---------------------------------
    @property
    def started(self) -> bool:
        return self.pid is not None

    def detach(self) -> None:
        if self.actor is not None and not self.lost_reason:
            _ray().get(self.actor.detach.remote(), timeout=CALL_TIMEOUT_SECONDS)

    def alive(self) -> bool:
        """The actor answers and its warm sandbox runs (a node lost while the pool is idle ends the pool)."""
        try:
            return bool(_ray().get(self.actor.alive.remote(), timeout=10))
        except Exception:
            return False

    def release(self) -> None:
        if self.actor is not None:
            try:
                _ray().kill(self.actor, no_restart=True)
            except Exception:
                pass
        self.placement.reused = None
        self.placement.release(self.host)

    def member(self) -> dict:
        return {"address": self.node_address, "node": self.node_id}

    # -- the controller's orders ----------------------------------------------------------------
    def _actor_or_cancel(self):
        """The actor, or None and no actor will be made (checked under _make_actor's lock)."""
        with self._finishing:
            if self.actor is None:
                self.placement.cancelled = True
            return self.actor

    def terminate(self) -> None:
        """The notice: SIGTERM to the agent and the script on the node. An instance still waiting for
        capacity is simply not started."""
        actor = self._actor_or_cancel()
        if actor is None:
            self._finish(143)
            return
        actor.terminate.remote()

    def kill(self) -> None:
        """SIGKILL everything on the node, then keep what it left (streams and artifacts) and go."""
        actor = self._actor_or_cancel()
        if actor is None:
            self._finish(137)
            return
        try:
            _ray().get(actor.kill.remote(), timeout=CALL_TIMEOUT_SECONDS)
        except Exception:
            pass
        if self._pump is not None:
            self._pump.join(timeout=CALL_TIMEOUT_SECONDS)
        self._finish(137)


def _new_actor(bundle: dict[str, float], group, index: int, name: str):
    """An InstanceActor taking the whole of bundle `index` of the placement group."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from shipyard.backends.ray.actor import InstanceActor

    return _ray().remote(InstanceActor).options(
        num_cpus=bundle.get("CPU", 0), num_gpus=bundle.get("GPU", 0),
        resources={k: v for k, v in bundle.items() if k not in ("CPU", "GPU")},
        scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index),
        max_restarts=0, max_concurrency=4, name=name,
    ).remote()


def _pool_actor(name: str):
    return _ray().get_actor(name, namespace="shipyard")


def _node_alive(node_id: str | None) -> bool:
    """Whether the cluster has the node alive; asked of the GCS directly (ray.nodes() ends the process
    when the head was restarted meanwhile)."""
    try:
        nodes = _ray()._private.worker.global_worker.gcs_client.get_all_node_info(timeout=CLUSTER_CHECK_SECONDS * 5)
    except Exception:
        return False
    return any(id_.hex() == node_id and info.state == 0 for id_, info in nodes.items())   # 0: GcsNodeState ALIVE
