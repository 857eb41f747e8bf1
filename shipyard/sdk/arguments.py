"""Which Estimator arguments mean what here. Every SageMaker argument is known: those shipyard honours,
those that mean nothing on machines you own (accepted with a one-line warning), and those whose
capability is not built yet (an error, never silently ignored). Anything else is a misspelling and gets
the closest valid name.

The honoured arguments are declared once: a field of the job spec (spec/job.py, with its default and
its meaning) is an argument of the same name, and SDK_ARGUMENTS adds the few that only the SDK reads
(they become the job's code, hyperparameters and launcher). The Estimator, attach() and the job file
derive theirs from these."""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any

from shipyard.errors import ValidationError, unknown_name_error
from shipyard.spec.job import JobSpec

# Spec fields that no user gives as such: fit() makes them (the job name, the encoded hyperparameters,
# the channels from `inputs`), the estimator's class names the framework and its image_uri the algorithm.
MADE_BY_FIT = frozenset({"job_name", "hyperparameters", "channels", "framework", "algorithm"})
SPEC_ARGUMENTS = tuple(name for name in JobSpec.model_fields if name not in MADE_BY_FIT)


@dataclass(frozen=True)
class SdkArgument:
    default: Any
    file_form: Any  # its type in a job.yaml (cli/jobfile.py)


SDK_ARGUMENTS = {
    "entry_point": SdkArgument(None, str),
    "source_dir": SdkArgument(None, str),
    "dependencies": SdkArgument((), list[str]),
    "hyperparameters": SdkArgument(None, dict[str, Any]),
    "base_job_name": SdkArgument(None, str),
    "code_location": SdkArgument(None, str),
    "container_log_level": SdkArgument(logging.INFO, Any),
    "disable_profiler": SdkArgument(False, bool),
    "distribution": SdkArgument(None, Any),  # a strategy name or SageMaker's dict; the SDK validates it
    # Pack what links in source_dir that point outside it point to (off: such a link is an error, so a
    # link to ~/.aws or /etc is never uploaded by accident).
    "follow_symlinks": SdkArgument(False, bool),
}

HONOURED = frozenset(SPEC_ARGUMENTS) | frozenset(SDK_ARGUMENTS)


def default(name: str) -> Any:
    """An honoured argument's default: the spec field's (None where the SDK computes it), or the SDK's."""
    if name in SDK_ARGUMENTS:
        return SDK_ARGUMENTS[name].default
    field = JobSpec.model_fields[name]
    return None if field.is_required() else field.get_default(call_default_factory=True)


MEANINGLESS_HERE = frozenset({
    "sagemaker_session", "volume_kms_key", "output_kms_key", "encrypt_inter_container_traffic",
    "enable_network_isolation",
    "training_repository_access_mode", "training_repository_credentials_provider_arn",
    "enable_infra_check", "enable_remote_debug", "enable_session_tag_chaining", "training_plan",
    "instance_placement_config", "compiler_config", "git_config",
    "container_entry_point", "container_arguments",
})

NOT_YET = {
    "model_uri": "model channels",
    "model_channel_name": "model channels",
    "disable_output_compression": "uncompressed model output",
    "training_recipe": "training recipes",
    "recipe_overrides": "training recipes",
}

# SageMaker v1 names still accepted by v2.
DEPRECATED = {
    "train_instance_count": "instance_count",
    "train_instance_type": "instance_type",
    "train_max_run": "max_run",
    "train_volume_size": "volume_size",
    "train_use_spot_instances": "use_spot_instances",
    "train_max_wait": "max_wait",
}


def _is_unset(value: Any) -> bool:
    return value is None or value is False or value == 0 or value == [] or value == {}


def sort_arguments(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The honoured arguments; warns about meaningless ones, refuses unknown and unbuilt ones."""
    honoured = {}
    for name, value in kwargs.items():
        name = DEPRECATED.get(name, name)
        if name in HONOURED:
            honoured[name] = value
        elif name in MEANINGLESS_HERE:
            if value is not None:
                warnings.warn(f"shipyard ignores {name!r}: it has no meaning for jobs on your own machines",
                              stacklevel=4)
        elif name in NOT_YET:
            if not _is_unset(value):
                raise ValidationError(name, value, f"{NOT_YET[name]} is not supported by shipyard yet; remove it")
        else:
            raise unknown_name_error("argument", name, HONOURED | MEANINGLESS_HERE | set(NOT_YET))
    return honoured
