"""`sagemaker_training.environment`: the toolkit's Environment, read from the job's config files as the
toolkit reads them, computed by shipyard.contract.environment.TrainingEnvironment (the same object the
agent derives the script's SM_* variables from), so the two always agree. As the toolkit's: paths are
str, hyperparameters are JSON-decoded, the object is a read-only Mapping of its properties.

What the toolkit probes is what the job was given: num_gpus and num_cpus are the instance's
(SM_NUM_GPUS, SM_NUM_CPUS), the job name TRAINING_JOB_NAME, framework_module SAGEMAKER_TRAINING_MODULE.
The tree is /opt/ml in a sandbox; without one the agent's SM_INPUT_DIR places it (SAGEMAKER_BASE_DIR, the
toolkit's own setting, wins over both). Unlike the toolkit outside SageMaker, nothing is created when the
config files are missing: that is an error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from shipyard.contract.environment import TRAINING_ENV_KEYS, TrainingEnvironment
from shipyard.contract.hyperparameters import decode, encode_json
from shipyard.contract.layout import SANDBOX_BASE, Layout
from shipyard.errors import ValidationError

BASE_PATH_ENV = "SAGEMAKER_BASE_DIR"
HYPERPARAMETERS_FILE = "hyperparameters.json"
RESOURCE_CONFIG_FILE = "resourceconfig.json"
INPUT_DATA_CONFIG_FILE = "inputdataconfig.json"


def _base() -> Path:
    if os.environ.get(BASE_PATH_ENV):
        return Path(os.environ[BASE_PATH_ENV])
    return Path(os.environ["SM_INPUT_DIR"]).parent if os.environ.get("SM_INPUT_DIR") else SANDBOX_BASE


_layout = Layout(_base())
# The toolkit's module-level paths (str, as its are).
base_dir = str(_layout.base)
code_dir = str(_layout.code_dir)
model_dir = str(_layout.model_dir)
input_dir = str(_layout.input_dir)
input_config_dir = str(_layout.input_config_dir)
output_dir = str(_layout.output_dir)
output_data_dir = str(_layout.output_data_dir)
output_intermediate_dir = str(_layout.output_intermediate_dir)
hyperparameters_file_dir = str(_layout.hyperparameters_file)
input_data_config_file_dir = str(_layout.inputdataconfig_file)
resource_config_file_dir = str(_layout.resourceconfig_file)


def _read_json(path: Path):
    if not path.is_file():
        raise ValidationError("sagemaker_training.environment", str(path), "no such config file: the toolkit's "
                              f"Environment reads the job's config files; run inside a job, or set {BASE_PATH_ENV} "
                              "to a directory holding input/config/")
    return json.loads(path.read_text(encoding="utf-8"))


def read_hyperparameters() -> dict:
    """hyperparameters.json, each value JSON-decoded where it parses (the toolkit's)."""
    return decode(_read_json(_layout.hyperparameters_file))


def read_resource_config() -> dict:
    return _read_json(_layout.resourceconfig_file)


def read_input_data_config() -> dict:
    return _read_json(_layout.inputdataconfig_file)


def channel_path(channel: str) -> str:
    return str(_layout.channel_dir(channel))


def num_gpus() -> int:
    """The GPUs the job gave this instance (SM_NUM_GPUS); outside a job, nvidia-smi's count, as the toolkit."""
    if os.environ.get("SM_NUM_GPUS"):
        return int(os.environ["SM_NUM_GPUS"])
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listed = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return 0
    return sum(1 for line in listed.splitlines() if line.startswith("GPU "))


def num_cpus() -> int:
    return int(os.environ.get("SM_NUM_CPUS") or os.cpu_count() or 1)


class Environment(Mapping):
    """A read-only snapshot of the training environment; `dict(env)` gives every property (the toolkit's
    MappingMixin). The arguments replace what the config files hold, as the toolkit's do (hyperparameters
    already decoded)."""

    def __init__(self, resource_config: dict | None = None, input_data_config: dict | None = None,
                 hyperparameters: dict | None = None) -> None:
        raw = encode_json(hyperparameters) if hyperparameters else _read_json(_layout.hyperparameters_file)
        self._s3_output = decode(raw).get("sagemaker_s3_output")
        self._env = TrainingEnvironment(
            layout=_layout,
            hyperparameters=raw,
            resource_config=resource_config or read_resource_config(),
            input_data_config=input_data_config or read_input_data_config(),
            job_name=os.environ.get("TRAINING_JOB_NAME"),
            num_gpus=num_gpus(),
            num_cpus=num_cpus(),
            framework_module=os.environ.get("SAGEMAKER_TRAINING_MODULE", ""),
            program=os.environ.get("SAGEMAKER_PROGRAM"),
        )
        self._values = self._env.to_dict()  # plain values: str paths, copies of the dicts

    # -- the toolkit's MappingMixin ------------------------------------------------------------------
    def properties(self) -> list[str]:
        return sorted(TRAINING_ENV_KEYS)

    def __getitem__(self, key: str):
        if key not in self._values:
            raise KeyError(f"Trying to access non property {key}")
        return self._values[key]

    def __iter__(self):
        return iter(self.properties())

    def __len__(self) -> int:
        return len(self._values)

    def __str__(self) -> str:
        return str(dict(self))

    # -- methods ---------------------------------------------------------------------------------------
    def sagemaker_s3_output(self) -> str | None:
        return self._s3_output

    def to_cmd_args(self) -> list[str]:
        return self._env.user_args

    def to_env_vars(self) -> dict[str, str]:
        """The SM_* variables of this environment: what the job gave the script's process."""
        return {k: v for k, v in self._env.to_env_vars().items() if k.startswith("SM_")}


def _property(name: str) -> property:
    return property(lambda self: self._values[name], doc=f"The toolkit's Environment.{name}.")


for _name in TRAINING_ENV_KEYS:
    setattr(Environment, _name, _property(_name))

