"""The instance catalog: what each instance type name means (size and price).

The packaged `instance_types.yaml` is the base; `$SHIPYARD_HOME/instance_types.yaml` (or `extra_path`) is
merged over it field by field, so a user can correct a price without restating the whole entry, or add a
type of their own."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field

from shipyard.errors import ValidationError, unknown_name_error
from shipyard.settings import shipyard_home

CATALOG_FILE = "instance_types.yaml"


class InstanceType(BaseModel):
    """One instance type. `None` sizes mean "whatever this machine has" (the local types)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    vcpus: int | None = Field(ge=1)
    memory_gib: float | None = Field(gt=0)
    gpus: int | None = Field(ge=0)
    gpu_memory_gib: float | None = Field(default=None, ge=0)  # per GPU
    on_demand_usd_per_hour: float = Field(default=0, ge=0)
    spot_usd_per_hour: float = Field(default=0, ge=0)
    # For the planner (docs/planner.md); the packaged file says where each figure comes from.
    gpu_tflops: float | None = Field(default=None, gt=0)   # per GPU, dense FP16/BF16 tensor
    gpu_link_gbytes_per_s: float | None = Field(default=None, gt=0)   # between the instance's GPUs
    network_gbps: float | None = Field(default=None, gt=0)   # between instances
    spot_interruptions_per_hour: float = Field(default=0, ge=0)   # per instance


def _read_entries(text: str, source: str) -> dict[str, dict[str, Any]]:
    return dict(_parsed(text, source))   # a copy: load_catalog merges into it


@functools.lru_cache(maxsize=8)
def _parsed(text: str, source: str) -> dict[str, dict[str, Any]]:
    """Parsed once per content: every describe() prices its job from the catalog (a server lists many)."""
    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 (safe loaders)
    except yaml.YAMLError as exc:
        raise ValidationError("instance_types file", source, f"not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValidationError("instance_types file", source, "must be a mapping of name -> fields")
    for name, fields in data.items():
        if not isinstance(name, str) or not isinstance(fields, dict):
            raise ValidationError("instance_type", name, f"in {source}: entry must be a mapping of fields")
    return data


def _build(name: str, fields: dict[str, Any], source: str) -> InstanceType:
    try:
        return InstanceType(**{**fields, "name": name})
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, err['loc'])) or 'entry'}: {err['msg']}" for err in exc.errors()
        )
        raise ValidationError("instance_type", name, f"in {source}: {problems}") from None


def load_catalog(extra_path: Path | None = None) -> dict[str, InstanceType]:
    """All known instance types by name. `extra_path` replaces the default user file location; unlike
    the default location, an explicit path must exist."""
    packaged = resources.files("shipyard.spec").joinpath(CATALOG_FILE)
    entries = _read_entries(packaged.read_text(encoding="utf-8"), str(packaged))

    user_path = Path(extra_path) if extra_path is not None else shipyard_home() / CATALOG_FILE
    if user_path.is_file():
        for name, fields in _read_entries(user_path.read_text(encoding="utf-8"), str(user_path)).items():
            merged = {**entries.get(name, {}), **fields}
            _build(name, merged, str(user_path))  # blame the user's file, not the packaged one
            entries[name] = merged
    elif extra_path is not None:
        raise ValidationError("instance_types file", str(user_path), "no such file")

    return {name: _build(name, fields, str(packaged)) for name, fields in entries.items()}


def get_instance_type(name: str, catalog: dict[str, InstanceType] | None = None) -> InstanceType:
    catalog = load_catalog() if catalog is None else catalog
    try:
        return catalog[name]
    except (KeyError, TypeError):
        raise unknown_name_error("instance_type", str(name), catalog) from None
