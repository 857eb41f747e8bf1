"""Which Estimator arguments mean what here. Every SageMaker argument is known: those shipyard honours,
those that mean nothing on machines you own (accepted with a one-line warning), and those whose
capability is not built yet (an error, never silently ignored). Anything else is a misspelling and gets
the closest valid name."""

from __future__ import annotations

import warnings
from typing import Any

from shipyard.errors import ValidationError, unknown_name_error

HONOURED = frozenset({
    "instance_count", "instance_type", "max_run", "input_mode", "output_path", "base_job_name",
    "metric_definitions", "environment", "source_dir", "hyperparameters", "container_log_level",
    "code_location", "entry_point", "dependencies", "tags", "enable_sagemaker_metrics",
    "disable_profiler", "debugger_hook_config", "framework_version", "py_version", "distribution",
    "use_spot_instances", "max_wait", "checkpoint_s3_uri", "checkpoint_local_path", "max_retry_attempts",
    # shipyard's own
    "oversubscribe", "stop_grace_seconds", "backend", "spot_simulation", "interruption_notice_seconds",
    "spot_without_checkpoints", "hang_timeout_seconds",
    "profiler_config", "rules",
})

MEANINGLESS_HERE = frozenset({
    "role", "sagemaker_session", "volume_size", "volume_kms_key", "output_kms_key", "subnets",
    "security_group_ids", "encrypt_inter_container_traffic", "enable_network_isolation",
    "training_repository_access_mode", "training_repository_credentials_provider_arn",
    "enable_infra_check", "enable_remote_debug", "enable_session_tag_chaining", "training_plan",
    "instance_placement_config", "compiler_config", "tensorboard_output_config", "git_config",
    "container_entry_point", "container_arguments", "image_uri",
})

NOT_YET = {
    "keep_alive_period_in_seconds": "warm pools",
    "instance_groups": "heterogeneous clusters",
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
