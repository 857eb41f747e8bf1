"""The agent's own configuration: what the platform tells one instance beyond the /opt/ml contract
(where its data comes from, where to write logs and events, its addresses and devices).

Plain dataclasses read from JSON: the agent starts on the path from submit to the first training step,
and these need none of the validation machinery of the user-facing models (the job was validated
before any instance existed)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

# Local instances talk over loopback addresses (see backends/sandbox.py), so that is their interface; a
# Ray instance's is its node's (the interface that holds the node's address, backends/ray/actor.py).
NETWORK_INTERFACE = "lo"


@dataclass(frozen=True)
class ChannelSource:
    """A channel as the agent needs it (the fields of spec.job.ChannelSpec)."""

    name: str
    uri: str
    distribution: str = "FullyReplicated"
    input_mode: str = "File"
    content_type: str | None = None
    record_wrapping: str | None = None
    s3_data_type: str = "S3Prefix"   # S3Prefix, ManifestFile (uri: the manifest), AugmentedManifestFile
    compression: str | None = None   # "Gzip": Pipe mode decompresses each object
    attribute_names: tuple[str, ...] = ()  # AugmentedManifestFile: what each line streams, in order
    shuffle_seed: int | None = None  # ShuffleConfig.Seed
    file_system_type: str | None = None  # EFS / FSxLustre: uri is a directory shown read-only at the channel
    instance_groups: tuple[str, ...] = ()  # the groups that get it (empty: every instance)

    @classmethod
    def of(cls, channel) -> ChannelSource:
        return cls(**{f.name: getattr(channel, f.name) for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class AgentConfig:
    job_name: str
    host: str
    hosts: tuple[str, ...]
    base: str                      # /opt/ml inside a sandbox, the instance's own directory outside one
    instance_dir: str
    log_path: str
    events_path: str
    hyperparameters: dict[str, str]
    num_cpus: int
    master_port: int
    host_addresses: dict[str, str]
    sandboxed: bool
    channels: tuple[ChannelSource, ...] = ()
    network_interface: str = NETWORK_INTERFACE
    # A Ray instance's: its node's network (CIDR), the same on every host where interface names differ
    # (backends/ray/actor.py). None for local instances, whose interface is lo on every one.
    network_subnet: str | None = None
    gpu_ids: tuple[str, ...] = ()
    environment: dict[str, str] = field(default_factory=dict)
    instance_type: str = "local"
    # A heterogeneous job's groups, as resourceconfig.json lists them ({instance_group_name, instance_type,
    # hosts}); empty: one group of instance_type.
    instance_groups: tuple[dict, ...] = ()
    checkpoint_uri: str | None = None
    checkpoint_local_path: str = "/opt/ml/checkpoints"
    # A TensorFlow job's model_dir when it is a path of this machine (its output's <job>/model): the
    # instances write it where it is.
    model_dir: str | None = None
    heartbeat_dir: str | None = None
    debugger: dict | None = None  # shipyard.runtime.debugger.agent.agent_settings; None: no hook
    profiler: dict | None = None  # shipyard.spec.profiler.agent_settings; None: no profiling
    # <output_path>/<job>: with a local output, writable in the sandbox, so that profiling turned on
    # while the job runs (control/profiling.py) can write its profiler-output there.
    output_prefix: str | None = None
    tensorboard: dict | None = None  # {"LocalPath", "S3OutputPath"} (runtime/tensorboard.py); None: not synced
    # A built-in algorithm's image (spec/images.py): the algorithm every instance runs instead of an entry point.
    algorithm: str | None = None

    @property
    def host_index(self) -> int:
        return self.hosts.index(self.host)

    def share(self, channel: ChannelSource) -> tuple[int, int]:
        """(this host's place, how many) among the hosts that get `channel`: what ShardedByS3Key deals the
        channel's objects over (in a heterogeneous job, only its groups' hosts)."""
        if not channel.instance_groups:
            return self.host_index, len(self.hosts)
        hosts = sorted(host for group in self.instance_groups for host in group["hosts"]
                       if group["instance_group_name"] in channel.instance_groups)
        return hosts.index(self.host), len(hosts)

    def local(self, container_path: str) -> Path:
        """A container path as this process sees it: paths under /opt/ml move with the base."""
        path, ml = Path(container_path), Path("/opt/ml")
        return Path(self.base) / path.relative_to(ml) if path.is_relative_to(ml) else path

    @property
    def checkpoint_dir(self) -> Path:
        return self.local(self.checkpoint_local_path)

    @property
    def site_packages(self) -> Path:
        """Where requirements.txt is installed: this job's, never the user's environment."""
        return Path(self.instance_dir) / "site-packages"

    def training_environment(self):
        """The toolkit's view of this instance, built from the same facts the config files hold."""
        from shipyard.contract.config import input_data_config, resource_config
        from shipyard.contract.environment import TrainingEnvironment
        from shipyard.contract.layout import Layout

        return TrainingEnvironment(
            layout=Layout(Path(self.base)),
            hyperparameters=self.hyperparameters,
            resource_config=resource_config(self.host, self.hosts, self.instance_type, self.network_interface,
                                            self.instance_groups),
            input_data_config=input_data_config(self.channels),
            job_name=self.job_name,
            num_gpus=len(self.gpu_ids),
            num_cpus=self.num_cpus,
        )

    def launch_context(self):
        from shipyard.runtime.launchers import LaunchContext

        return LaunchContext(
            master_port=self.master_port, host_addresses=self.host_addresses, sandboxed=self.sandboxed,
            instance_dir=self.instance_dir, network_subnet=self.network_subnet,
        )

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self), indent=2))

    @classmethod
    def read(cls, path: Path) -> AgentConfig:
        return cls.from_dict(json.loads(path.read_text()))

    @classmethod
    def from_dict(cls, data: dict) -> AgentConfig:
        data = dict(data)
        data["hosts"] = tuple(data["hosts"])
        data["gpu_ids"] = tuple(data["gpu_ids"])
        data["channels"] = tuple(ChannelSource(**c) for c in data["channels"])
        data["instance_groups"] = tuple(data.get("instance_groups", ()))
        return cls(**data)
