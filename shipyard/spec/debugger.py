"""SageMaker's DebugHookConfig: where tensors go and which collections the hook saves when. Validated
when made: unknown hook or collection parameters, unknown collection names without an include_regex,
and bad values (a save_interval of 0, a regex that does not compile) name the fix."""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field, model_validator

from shipyard.errors import ValidationError, unknown_name_error
from shipyard.spec.build import UserModel
from shipyard.storage.uri import join

LOCAL_PATH = "/opt/ml/output/tensors"
SAVE_KEYS = ("save_interval", "save_steps", "start_step", "end_step")
MODE_PREFIXES = ("train", "eval", "predict", "global")
HOOK_KEYS = ("dry_run", "save_all", "include_workers", "include_regex", "reductions", "save_raw_tensor",
             "save_shape")
COLLECTION_KEYS = ("include_regex", "save_histogram", "reductions", "save_raw_tensor")
BOOL_KEYS = ("dry_run", "save_all", "save_raw_tensor", "save_shape", "save_histogram")


def debug_output_uri(output_path: str, job_name: str, hook_path: str | None = None) -> str:
    """Where a job's tensors are mirrored while it runs (SageMaker's <s3_output_path>/<job>/debug-output)."""
    return join(hook_path or output_path, job_name, "debug-output")


def _save_keys() -> list[str]:
    return [*SAVE_KEYS, *(f"{m}.{k}" for m in MODE_PREFIXES for k in SAVE_KEYS)]


def check_parameters(where: str, parameters: dict[str, str], own_keys: tuple[str, ...]) -> None:
    from shipyard.contract.debugger.collections import parse_reductions
    from shipyard.contract.debugger.save_config import parse_value, split_key

    if len(parameters) > 20:
        raise ValidationError(where, len(parameters), "at most 20 parameters are allowed")
    valid = [*own_keys, *_save_keys()]
    for key, text in parameters.items():
        if key not in valid:
            raise unknown_name_error(f"{where} parameter", key, valid)
        name = split_key(key)[1]
        try:
            if name in SAVE_KEYS:
                parse_value(name, text)
            elif name in BOOL_KEYS and str(text).lower() not in ("true", "false"):
                raise ValueError("must be True or False")
            elif name == "include_workers" and text not in ("one", "all"):
                raise ValueError("must be 'one' or 'all'")
            elif name == "reductions":
                parse_reductions(text)
            elif name == "include_regex":
                for pattern in str(text).split(","):
                    re.compile(pattern)
        except (ValueError, re.error) as exc:
            raise ValidationError(f"{where} parameter {key}", text, str(exc)) from None


class CollectionConfig(UserModel):
    """A built-in collection to tune, or a new one (which needs an include_regex)."""

    POSITIONAL: ClassVar[tuple[str, ...]] = ("name", "parameters")
    name: str = Field(min_length=1, max_length=256)
    parameters: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _valid(self) -> CollectionConfig:
        from shipyard.contract.debugger.collections import BUILTIN_REGEX

        if self.name not in BUILTIN_REGEX and "include_regex" not in self.parameters:
            guess = unknown_name_error("collection", self.name, BUILTIN_REGEX)
            raise ValidationError("collection", self.name, f"not a built-in collection ({guess.fix}); "
                                  "a new collection needs an include_regex parameter")
        check_parameters(f"collection {self.name}", self.parameters, COLLECTION_KEYS)
        return self


TENSORBOARD_LOCAL_PATH = "/opt/ml/output/tensorboard"


class TensorBoardOutputConfig(UserModel):
    """SageMaker's TensorBoardOutputConfig: what the script writes under `container_local_output_path` is
    synced to `<s3_output_path>/<job>/tensorboard-output/` while the job runs."""

    POSITIONAL: ClassVar[tuple[str, ...]] = ("s3_output_path", "container_local_output_path")
    s3_output_path: str = Field(min_length=1)
    container_local_output_path: str = TENSORBOARD_LOCAL_PATH

    def output_uri(self, job_name: str) -> str:
        return join(self.s3_output_path, job_name, "tensorboard-output")


class DebuggerHookConfig(UserModel):
    POSITIONAL: ClassVar[tuple[str, ...]] = ("s3_output_path", "container_local_output_path", "hook_parameters",
                                             "collection_configs")
    s3_output_path: str | None = None  # default: the job's output path; <job>/debug-output/ is appended
    container_local_output_path: str = LOCAL_PATH
    hook_parameters: dict[str, str] = Field(default_factory=dict)
    collection_configs: tuple[CollectionConfig, ...] = ()

    @model_validator(mode="after")
    def _valid(self) -> DebuggerHookConfig:
        check_parameters("hook", self.hook_parameters, HOOK_KEYS)
        if len(self.collection_configs) > 20:
            raise ValidationError("collection_configs", len(self.collection_configs), "at most 20 collections")
        return self

    def with_collections(self, extra: tuple[CollectionConfig, ...]) -> DebuggerHookConfig:
        """The rules' collections merged in, by name: a collection the user configured keeps the user's
        settings (a rule asking gradients every 500 steps does not override gradients every 5), and of
        two rules asking for the same collection the first is kept."""
        merged = list(self.collection_configs)
        for config in extra:
            if all(c.name != config.name for c in merged):
                merged.append(config)
        return self.model_copy(update={"collection_configs": tuple(merged)})
