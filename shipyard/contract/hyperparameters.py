"""Hyperparameters on both sides of hyperparameters.json: how the SDK encodes them (spec 1.7) and how
the toolkit decodes, splits and turns them into arguments and env values (spec 1.5-1.7)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from shipyard.errors import ValidationError

# Toolkit params.SAGEMAKER_HYPERPARAMETERS: consumed by the toolkit, never passed to the script.
RESERVED: frozenset[str] = frozenset({
    "sagemaker_program",
    "sagemaker_submit_directory",
    "sagemaker_enable_cloudwatch_metrics",
    "sagemaker_region",
    "sagemaker_container_log_level",
    "sagemaker_job_name",
    "default_user_module_name",
    "_tuning_objective_metric",
    "sagemaker_s3_output",
})
SAGEMAKER_PREFIX = "sagemaker_"


def _check_key(key: Any) -> None:
    if not isinstance(key, str):
        raise ValidationError("hyperparameters", key, "hyperparameter names must be strings")


def check_user(hps: Mapping[str, Any]) -> None:
    """A user's hyperparameters before the SDK adds its own: names that are not the toolkit's, values that
    reach the script as what they are (NaN and infinity are not JSON, and `--lr nan` is rarely meant)."""
    for key, value in hps.items():
        _check_key(key)
        if key.startswith(SAGEMAKER_PREFIX) or key in RESERVED:
            raise ValidationError("hyperparameters", key, "sagemaker_* names are the SDK's own: the toolkit "
                                  "consumes them and the script never sees them; rename it")
        try:
            json.dumps(value, allow_nan=False)
        except ValueError:
            raise ValidationError(f"hyperparameters[{key!r}]", value, "must be a finite number: NaN and "
                                  "infinity are not JSON; pass a string if the script parses one") from None
        except TypeError:
            pass  # encode_json names it, encode_str sends str(value)


def encode_json(hps: Mapping[str, Any]) -> dict[str, str]:
    """What framework estimators send: `json.dumps` of every value (default separators, as the SDK)."""
    encoded = {}
    for key, value in hps.items():
        _check_key(key)
        try:
            encoded[key] = json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise ValidationError(
                f"hyperparameters[{key!r}]", value,
                f"must be JSON-serialisable (str, number, bool, None, list or dict): {exc}",
            ) from None
    return encoded


def encode_str(hps: Mapping[str, Any]) -> dict[str, str]:
    """What the generic Estimator sends without source_dir: `str(v)`, so dicts arrive as a repr."""
    for key in hps:
        _check_key(key)
    return {key: str(value) for key, value in hps.items()}


# How an estimator sends its hyperparameters (a tuning job records which, for the trials it starts).
ENCODINGS = {"json": encode_json, "str": encode_str}


def decode(raw: Mapping[str, str]) -> dict[str, Any]:
    decoded = {}
    for key, value in raw.items():
        try:
            decoded[key] = json.loads(value)
        except (TypeError, ValueError):
            decoded[key] = value
    return decoded


def split(decoded: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(user hyperparameters, additional_framework_parameters); reserved keys go to neither."""
    user = {k: v for k, v in decoded.items() if k not in RESERVED and not k.startswith(SAGEMAKER_PREFIX)}
    framework = {k: v for k, v in decoded.items() if k not in RESERVED and k.startswith(SAGEMAKER_PREFIX)}
    return user, framework


def _arg_str(value: Any) -> str:
    return "" if value is None else str(value)


def to_cmd_args(user: Mapping[str, Any]) -> list[str]:
    """Toolkit `mapping.to_cmd_args`: sorted keys; `-k` for one-character keys, else `--key`."""
    args: list[str] = []
    for key in sorted(user):
        name = _arg_str(key)
        flag = "" if not name else (f"--{name}" if len(name) > 1 else f"-{name}")
        value = user[key]
        if hasattr(value, "items"):
            # Inner values use plain %s, so a None inside a dict prints "None", unlike a top-level None.
            value = ",".join(f"{k}={v}" for k, v in sorted(value.items()))
        args += [flag, _arg_str(value)]
    return args


def env_value(value: Any) -> str:
    """Toolkit `mapping.to_env_vars` value rule."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
