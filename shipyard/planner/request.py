"""What the user knows, as `shipyard plan` and `shipyard.plan()` take it: a deadline, a budget, what was
measured (a baseline: hours on an instance type), the model and dataset sizes, whether interruptions
are acceptable. Durations and sizes are written as people write them ("8h", "10TB", "70e9", "7B");
every bad value is an error naming the field and the form it wants."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from shipyard.errors import ValidationError
from shipyard.spec.build import UserModel

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d)?\s*$", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmgtp]i?b|b)?\s*$", re.IGNORECASE)
_BYTES = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50}
_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmbt])?\s*$", re.IGNORECASE)
_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def hours(field: str, value: str | float, now: float | None = None) -> float:
    """A duration ("8h", "90m", "2d", "3600s"; a bare number is hours) or a moment (ISO 8601,
    "2026-11-26T18:00", local time unless it says otherwise) as hours from `now`, > 0."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number, unit = float(value), "h"
    else:
        match = _DURATION.match(str(value))
        if not match:
            return _until(field, str(value), now)
        number, unit = float(match.group(1)), (match.group(2) or "h").lower()
    if number <= 0:
        raise ValidationError(field, value, "must be longer than zero")
    return number * _SECONDS[unit] / 3600


def _moment(field: str, text: str) -> float:
    """An ISO 8601 date or time ("2026-11-26", "2026-11-26T18:00"; local time unless it says) as a timestamp."""
    import datetime as dt

    try:
        return dt.datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ValidationError(field, text, "not a duration or a moment: write it as 8h, 90m, 2d, 3600s or "
                              "2026-11-26T18:00") from None


def _until(field: str, text: str, now: float | None) -> float:
    import time

    left = (_moment(field, text) - (time.time() if now is None else now)) / 3600
    if left <= 0:
        raise ValidationError(field, text, f"is in the past ({-left:.1f} h ago); give a moment to come or a "
                              "duration from now (8h)")
    return left


def since(field: str, text: str, now: float | None = None) -> float:
    """A moment in the past as a timestamp: a duration back from `now` ("7d") or a date ("2026-11-01")."""
    import time

    now = time.time() if now is None else now
    if _DURATION.match(text):
        return now - hours(field, text) * 3600
    moment = _moment(field, text)
    if moment > now:
        raise ValidationError(field, text, "is in the future; give a past date or a duration back from now (7d)")
    return moment


def size_bytes(field: str, value: str | float) -> float:
    """A size ("10GB", "10TB", "512MiB"; a bare number is bytes) in bytes, > 0."""
    match = _SIZE.match(str(value))
    if not match:
        raise ValidationError(field, value, "not a size: write it as 10GB, 10TB or 512MiB")
    number = float(match.group(1)) * _BYTES[(match.group(2) or "b").lower()]
    if number <= 0:
        raise ValidationError(field, value, "must be a positive size")
    return number


def count(field: str, value: str | float) -> float:
    """A parameter count ("70e9", "7B", "350M"), > 0."""
    match = _COUNT.match(str(value))
    if not match:
        raise ValidationError(field, value, "not a parameter count: write it as 70e9, 7B or 350M")
    number = float(match.group(1)) * _SCALE.get((match.group(2) or "").lower(), 1)
    if number < 1:
        raise ValidationError(field, value, "must be at least one parameter")
    return number


def baseline(value: str) -> tuple[float, str | None]:
    """`24h@ml.p3.2xlarge` (hours on that type) or `24h` (on the job's own instance type)."""
    duration, _, instance_type = str(value).partition("@")
    return hours("baseline", duration), (instance_type.strip() or None)


class PlanRequest(UserModel):
    """In numbers. `baseline_hours` on `baseline_instance_type` is what one instance of it takes for the
    whole training (the guides' "24 hours on a single ml.p3.2xlarge"); `step_seconds` its time per
    optimizer step there (the number of steps follows from the two; without it, from the model size:
    models.default_step_seconds)."""

    deadline_hours: float = Field(gt=0)
    budget: float | None = Field(default=None, gt=0)
    baseline_hours: float = Field(gt=0)
    baseline_instance_type: str
    step_seconds: float | None = Field(default=None, gt=0)   # None: from the model size (planner/models.py)
    tokens_per_accelerator: float = Field(default=8192, gt=0)   # per optimizer step, for that default
    parameters: float | None = Field(default=None, ge=1)
    activation_bytes: float = Field(default=2e9, ge=0)
    dataset_bytes: float | None = Field(default=None, gt=0)
    epochs: float = Field(default=1.0, gt=0)
    hard_deadline: bool = False
    interruptions_ok: bool = True
    checkpoint_minutes: float | None = Field(default=30.0, gt=0)   # None: no checkpoints
    dtype: str = "bf16"
    optimizer: str = "adam"
    max_instances: int = Field(default=64, ge=1)
    # sdk/calibrate.py's Calibration (as a dict) of the baseline's type, and the training's steps on one
    # instance: the baseline's type is then planned from these measurements (models.calibrated_seconds).
    calibration: dict | None = None
    steps: float | None = Field(default=None, gt=0)

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, value: str) -> str:
        if value not in ("bf16", "fp16", "fp32"):
            raise ValidationError("dtype", value, "must be bf16, fp16 or fp32")
        return value

    @field_validator("optimizer")
    @classmethod
    def _optimizer(cls, value: str) -> str:
        if value not in ("adam", "sgd"):
            raise ValidationError("optimizer", value, "must be adam (AdamW too) or sgd")
        return value

    @model_validator(mode="after")
    def _known_type(self) -> PlanRequest:
        from shipyard.spec.catalog import get_instance_type

        try:
            get_instance_type(self.baseline_instance_type)
        except ValidationError as exc:   # its fix names the closest type
            raise ValidationError("baseline", self.baseline_instance_type, exc.fix) from None
        return self
