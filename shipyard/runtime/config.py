"""The agent's own configuration: what the platform tells one instance beyond the /opt/ml contract
(where its data comes from, where to write logs and events, its addresses and devices)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from shipyard.spec.job import ChannelSpec


# Instances talk over loopback addresses (see backends/sandbox.py), so that is their interface.
NETWORK_INTERFACE = "lo"


class AgentConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    job_name: str
    host: str
    hosts: tuple[str, ...]
    base: str                      # /opt/ml inside a sandbox, the instance's own directory outside one
    instance_dir: str
    log_path: str
    events_path: str
    hyperparameters: dict[str, str]
    channels: tuple[ChannelSpec, ...] = ()
    num_cpus: int
    gpu_ids: tuple[str, ...] = ()
    master_port: int
    host_addresses: dict[str, str]
    sandboxed: bool
    environment: dict[str, str] = {}
    instance_type: str = "local"

    @property
    def host_index(self) -> int:
        return self.hosts.index(self.host)

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
            resource_config=resource_config(self.host, self.hosts, self.instance_type, NETWORK_INTERFACE),
            input_data_config=input_data_config(self.channels),
            job_name=self.job_name,
            num_gpus=len(self.gpu_ids),
            num_cpus=self.num_cpus,
        )

    def launch_context(self):
        from shipyard.runtime.launchers import LaunchContext

        return LaunchContext(
            master_port=self.master_port, host_addresses=self.host_addresses, sandboxed=self.sandboxed
        )

    def write(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2))

    @classmethod
    def read(cls, path: Path) -> AgentConfig:
        return cls.model_validate_json(path.read_text())
