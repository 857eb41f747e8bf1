"""The files the platform writes to /opt/ml/input/config before the container starts (spec 1.2, 1.3): three,
and checkpointconfig.json for a job with checkpoints."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shipyard.contract.layout import Layout
from shipyard.errors import ValidationError

if TYPE_CHECKING:  # keeps pydantic out of processes that only need the contract
    from shipyard.spec.job import ChannelSpec

HOMOGENEOUS_GROUP = "homogeneousCluster"


def resource_config(
    current_host: str, hosts: Sequence[str], instance_type: str, network_interface_name: str = "eth0",
    groups: Sequence[Mapping[str, Any]] = (),
) -> dict:
    """`groups`: a heterogeneous job's instance groups ({instance_group_name, instance_type, hosts}); without
    them the job is one group of `instance_type`, homogeneousCluster."""
    # Plain lexicographic sort, as SageMaker does: algo-10 comes before algo-2. The group's host list
    # is sorted too (the real platform may not sort it), so the leader is always hosts[0].
    ordered = sorted(hosts)
    if current_host not in ordered:
        raise ValidationError("current_host", current_host, f"must be one of {ordered}")
    groups = [{"instance_group_name": g["instance_group_name"], "instance_type": g["instance_type"],
               "hosts": sorted(g["hosts"])} for g in groups] or [
        {"instance_group_name": HOMOGENEOUS_GROUP, "instance_type": instance_type, "hosts": list(ordered)}]
    current = next((g for g in groups if current_host in g["hosts"]), None)
    if current is None:
        raise ValidationError("current_host", current_host, "is in none of the instance groups")
    return {
        "current_host": current_host,
        "current_instance_type": current["instance_type"],
        "current_group_name": current["instance_group_name"],
        "hosts": ordered,
        "instance_groups": groups,
        "network_interface_name": network_interface_name,
    }


def input_data_config(channels: Iterable[ChannelSpec]) -> dict:
    config: dict[str, dict[str, str]] = {}
    for channel in channels:
        entry = {}
        if channel.content_type:
            entry["ContentType"] = channel.content_type
        entry["TrainingInputMode"] = channel.input_mode
        entry["S3DistributionType"] = channel.distribution
        entry["RecordWrapperType"] = channel.record_wrapping or "None"
        config[channel.name] = entry
    return config


def _write_json_atomic(path: Path, obj: Any) -> None:
    # A reader (the toolkit in another process) must never see a half-written file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; the job may run as another user
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_configs(
    layout: Layout, hyperparameters: Mapping[str, str], resource_config: dict, input_data_config: dict,
    checkpoint_config: dict | None = None,
) -> None:
    """`checkpoint_config`: the job's CheckpointConfig ({"LocalPath", "S3Uri"}), which SageMaker's algorithm
    containers read to find the checkpoint directory (the XGBoost algorithm, shipyard/algorithms)."""
    for key, value in hyperparameters.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValidationError(
                f"hyperparameters.{key}", value, "hyperparameters.json holds strings only; encode values first"
            )
    layout.input_config_dir.mkdir(parents=True, exist_ok=True)
    _write_json_atomic(layout.hyperparameters_file, dict(hyperparameters))
    _write_json_atomic(layout.resourceconfig_file, resource_config)
    _write_json_atomic(layout.inputdataconfig_file, input_data_config)
    if checkpoint_config is not None:
        _write_json_atomic(layout.checkpointconfig_file, checkpoint_config)
    else:   # a warm instance's previous job may have had one
        layout.checkpointconfig_file.unlink(missing_ok=True)
