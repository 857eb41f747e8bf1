"""`TrainingEnvironment`: what the toolkit's `sagemaker_training.environment.Environment` computes from the
config files, and the SM_* variables it exports from that (spec 1.5, 1.6, 1.8, 2.2). Inputs the toolkit
probes for itself (GPU and CPU counts, TRAINING_JOB_NAME, SAGEMAKER_TRAINING_MODULE, the boto3 region) are
passed in, so the same job always yields the same environment."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shipyard.contract.config import HOMOGENEOUS_GROUP
from shipyard.contract.hyperparameters import RESERVED, SAGEMAKER_PREFIX, decode, env_value, split, to_cmd_args
from shipyard.contract.layout import Layout

DEFAULT_LOG_LEVEL = 20  # logging.INFO

# Any of these truthy puts the current instance group into distribution_instance_groups.
LAUNCHER_FLAGS = (
    "sagemaker_mpi_enabled",
    "sagemaker_parameter_server_enabled",
    "sagemaker_distributed_dataparallel_enabled",
    "sagemaker_pytorch_ddp_enabled",
    "sagemaker_pytorch_xla_multi_worker_enabled",
    "sagemaker_multi_worker_mirrored_strategy_enabled",
    "sagemaker_torch_distributed_enabled",
)

# Every public property of the toolkit's Environment, i.e. the keys of SM_TRAINING_ENV (spec 1.8).
TRAINING_ENV_KEYS = (
    "additional_framework_parameters", "channel_input_dirs", "current_host", "current_instance_group",
    "current_instance_group_hosts", "current_instance_type", "distribution_hosts",
    "distribution_instance_groups", "framework_module", "hosts", "hyperparameters", "input_config_dir",
    "input_data_config", "input_dir", "instance_groups", "instance_groups_dict", "is_hetero", "is_master",
    "is_modelparallel_enabled", "is_smddpmprun_installed", "is_smddprun_installed", "job_name", "log_level",
    "master_hostname", "model_dir", "module_dir", "module_name", "network_interface_name", "num_cpus",
    "num_gpus", "num_neurons", "output_data_dir", "output_dir", "output_intermediate_dir", "resource_config",
    "topology", "user_entry_point",
)


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class TrainingEnvironment:
    def __init__(
        self,
        *,
        layout: Layout,
        hyperparameters: Mapping[str, str],
        resource_config: dict,
        input_data_config: dict,
        job_name: str,
        num_gpus: int,
        num_cpus: int,
        framework_module: str = "",
        region: str | None = None,
        program: str | None = None,
    ) -> None:
        """`hyperparameters` is hyperparameters.json as written (str -> str). `program` plays the part of
        the SAGEMAKER_PROGRAM env var: when given it wins over the sagemaker_program hyperparameter."""
        self._layout = layout
        self._resource_config = copy.deepcopy(resource_config)
        self._input_data_config = copy.deepcopy(input_data_config)
        self._job_name = job_name
        self._num_gpus, self._num_cpus = num_gpus, num_cpus
        self._framework_module = framework_module or None  # the toolkit reports null when unset

        decoded = decode(hyperparameters)
        self._hyperparameters, self._framework_params = split(decoded)
        sm = {k: v for k, v in decoded.items() if k in RESERVED or k.startswith(SAGEMAKER_PREFIX)}
        self._sagemaker_hps = sm
        self._region = sm.get("sagemaker_region", region)

        # The toolkit str()s a missing program into "None" for module_name; kept for fidelity.
        self._module_name = program if program is not None else str(sm.get("sagemaker_program"))
        self._user_entry_point = program or sm.get("sagemaker_program")
        self._module_dir = str(sm.get("sagemaker_submit_directory", layout.code_dir))
        self._log_level = sm.get("sagemaker_container_log_level", DEFAULT_LOG_LEVEL)

        rc = self._resource_config
        self._hosts = list(rc["hosts"])
        self._current_host = rc["current_host"]
        self._current_group = rc.get("current_group_name", HOMOGENEOUS_GROUP)
        self._groups = list(rc.get("instance_groups", []))
        self._distribution_groups = self._framework_params.get(
            "sagemaker_distribution_instance_groups", self._default_distribution_groups()
        )
        self._distribution_hosts = self._compute_distribution_hosts()
        self._master = self._distribution_hosts[0] if self._distribution_hosts else self._hosts[0]

    @classmethod
    def load(cls, layout: Layout, **kwargs: Any) -> TrainingEnvironment:
        def read(path: Path) -> Any:
            return json.loads(path.read_text(encoding="utf-8"))

        return cls(
            layout=layout,
            hyperparameters=read(layout.hyperparameters_file),
            resource_config=read(layout.resourceconfig_file),
            input_data_config=read(layout.inputdataconfig_file),
            **kwargs,
        )

    def _default_distribution_groups(self) -> list[str]:
        if any(self._framework_params.get(flag, False) for flag in LAUNCHER_FLAGS):
            return [self._current_group]
        return []

    def _compute_distribution_hosts(self) -> list[str]:
        if not self._groups:  # the toolkit's local-mode branch: every host distributes
            return list(self._hosts)
        hosts: list[str] = []
        for group in self._groups:  # resourceconfig order, each group's own (maybe unsorted) host order
            if group["instance_group_name"] in self._distribution_groups:
                hosts.extend(group["hosts"])
        return hosts

    @property
    def layout(self) -> Layout:
        return self._layout

    # --- the SM_TRAINING_ENV keys -------------------------------------------------------------------
    @property
    def additional_framework_parameters(self) -> dict[str, Any]:
        return self._framework_params

    @property
    def channel_input_dirs(self) -> dict[str, Path]:
        return {name: self._layout.channel_dir(name) for name in self._input_data_config}

    @property
    def current_host(self) -> str:
        return self._current_host

    @property
    def current_instance_group(self) -> str:
        return self._current_group

    @property
    def current_instance_group_hosts(self) -> list[str]:
        for group in self._groups:
            if group["instance_group_name"] == self._current_group:
                return group["hosts"]
        return []

    @property
    def current_instance_type(self) -> str:
        return self._resource_config.get("current_instance_type", "local")

    @property
    def distribution_hosts(self) -> list[str]:
        return self._distribution_hosts

    @property
    def distribution_instance_groups(self) -> list[str]:
        return self._distribution_groups

    @property
    def framework_module(self) -> str | None:
        return self._framework_module

    @property
    def hosts(self) -> list[str]:
        return self._hosts

    @property
    def hyperparameters(self) -> dict[str, Any]:
        return self._hyperparameters

    @property
    def input_config_dir(self) -> Path:
        return self._layout.input_config_dir

    @property
    def input_data_config(self) -> dict:
        return self._input_data_config

    @property
    def input_dir(self) -> Path:
        return self._layout.input_dir

    @property
    def instance_groups(self) -> list[str]:
        return [group["instance_group_name"] for group in self._groups]

    @property
    def instance_groups_dict(self) -> dict[str, dict]:
        return {group["instance_group_name"]: group for group in self._groups}

    @property
    def is_hetero(self) -> bool:
        return len(self._groups) > 1

    @property
    def is_master(self) -> bool:
        return self._current_host == self._master

    @property
    def is_modelparallel_enabled(self) -> bool:
        # The toolkit tests os.environ["SM_HP_MP_PARAMETERS"] against "" and "{}". It builds the exported
        # SM_TRAINING_ENV before that variable exists (so real dumps show null), while the launchers' later
        # Environment sees it. We report what the launchers see, from the value that variable would hold.
        if "mp_parameters" not in self._hyperparameters:
            return False
        return env_value(self._hyperparameters["mp_parameters"]) not in ("", "{}")

    @property
    def is_smddpmprun_installed(self) -> bool:
        return False

    @property
    def is_smddprun_installed(self) -> bool:
        return False

    @property
    def job_name(self) -> str:
        return self._job_name

    @property
    def log_level(self) -> Any:
        return self._log_level

    @property
    def master_hostname(self) -> str:
        return self._master

    @property
    def model_dir(self) -> Path:
        return self._layout.model_dir

    @property
    def module_dir(self) -> str:
        return self._module_dir  # a URI (s3://...) as often as a path

    @property
    def module_name(self) -> str:
        name = self._module_name
        return name[:-3] if name and name.endswith(".py") else name

    @property
    def network_interface_name(self) -> str:
        return self._resource_config.get("network_interface_name", "eth0")

    @property
    def num_cpus(self) -> int:
        return self._num_cpus

    @property
    def num_gpus(self) -> int:
        return self._num_gpus

    @property
    def num_neurons(self) -> int:
        return 0

    @property
    def output_data_dir(self) -> Path:
        return self._layout.output_data_dir

    @property
    def output_dir(self) -> Path:
        return self._layout.output_dir

    @property
    def output_intermediate_dir(self) -> Path:
        return self._layout.output_intermediate_dir

    @property
    def resource_config(self) -> dict:
        return self._resource_config

    @property
    def topology(self) -> Any:
        return self._resource_config.get("topology")

    @property
    def user_entry_point(self) -> str | None:
        return self._user_entry_point

    # --- derived ------------------------------------------------------------------------------------
    @property
    def user_args(self) -> list[str]:
        return to_cmd_args(self._hyperparameters)

    def to_dict(self) -> dict:
        return {key: _plain(getattr(self, key)) for key in TRAINING_ENV_KEYS}

    def to_env_vars(self) -> dict[str, str]:
        env: dict[str, Any] = {
            "hosts": self.hosts,
            "network_interface_name": self.network_interface_name,
            "hps": self.hyperparameters,
            "user_entry_point": self.user_entry_point,
            "framework_params": self.additional_framework_parameters,
            "resource_config": self.resource_config,
            "input_data_config": self.input_data_config,
            "output_data_dir": self.output_data_dir,
            "channels": sorted(self._input_data_config),
            "current_host": self.current_host,
            "current_instance_type": self.current_instance_type,
            "current_instance_group": self.current_instance_group,
            "current_instance_group_hosts": self.current_instance_group_hosts,
            "instance_groups": self.instance_groups,
            "instance_groups_dict": self.instance_groups_dict,
            "distribution_instance_groups": self.distribution_instance_groups,
            "is_hetero": self.is_hetero,
            "module_name": self.module_name,
            "log_level": self.log_level,
            "framework_module": self.framework_module,
            "input_dir": self.input_dir,
            "input_config_dir": self.input_config_dir,
            "output_dir": self.output_dir,
            "num_cpus": self.num_cpus,
            "num_gpus": self.num_gpus,
            "num_neurons": self.num_neurons,
            "model_dir": self.model_dir,
            "module_dir": self.module_dir,
            "training_env": self.to_dict(),
            "user_args": self.user_args,
            "output_intermediate_dir": self.output_intermediate_dir,
        }
        if self.topology is not None:
            env["topology"] = self.topology
        for name, path in self.channel_input_dirs.items():
            env[f"channel_{name}"] = path
        for key, value in self.hyperparameters.items():
            env[f"hp_{key}"] = value
        # The name is only upper-cased: hyphens and dots survive (SM_HP_LEARNING-RATE).
        out = {f"SM_{key.upper()}": env_value(_plain(value)) for key, value in env.items()}

        out["TRAINING_JOB_NAME"] = self.job_name
        out["CURRENT_HOST"] = self.current_host
        if "sagemaker_job_name" in self._sagemaker_hps:
            out["SAGEMAKER_JOB_NAME"] = env_value(self._sagemaker_hps["sagemaker_job_name"])
        if self._region:
            out["SAGEMAKER_REGION"] = env_value(self._region)
        return out
