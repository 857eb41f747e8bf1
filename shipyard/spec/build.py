"""Models of what a user writes, and making them, with shipyard's error instead of pydantic's: the field,
the value, the fix."""

from __future__ import annotations

from typing import Any, ClassVar

import pydantic
from pydantic import BaseModel, ConfigDict

from shipyard.errors import ValidationError, unknown_name_error


def as_validation_error(exc: pydantic.ValidationError, model: type, field: str = "") -> ValidationError:
    """pydantic's first error as ours, its field under `field` (the argument the values came in; none
    when the model was made directly). A check of ours inside a validator (or a nested UserModel) already
    names its field, value and fix; a misspelled field gets the closest valid name."""
    error = exc.errors()[0]
    ours = (error.get("ctx") or {}).get("error")
    path = [str(p) for p in error["loc"]]
    where = ".".join(p for p in (field, *path) if p)
    if isinstance(ours, ValidationError):
        if ours.field == model.__name__:  # a rule about several fields, raised by the model itself
            return ValidationError(where or ours.field, ours.value, ours.fix)
        if path and ours.field.startswith(path[-1]) and ours.field[len(path[-1]):][:1] in ("", "[", "."):
            where = ".".join(p for p in (field, *path[:-1]) if p)  # the check named its own field already
        return ValidationError(f"{where}.{ours.field}" if where else ours.field, ours.value, ours.fix)
    if error["type"] == "extra_forbidden" and len(path) == 1:
        return unknown_name_error(f"{field or model.__name__} argument", path[0], model.model_fields)
    value = error.get("input") if path else ...  # a rule about several fields: the message names them
    return ValidationError(where or model.__name__, value, error["msg"].removeprefix("Value error, "))


class UserModel(BaseModel):
    """Frozen, no unknown fields, and a wrong value raises shipyard's ValidationError when it is made.
    Arguments are by name, except those POSITIONAL names: a class SageMaker's SDK has takes its
    positional arguments in SageMaker's order (`CollectionConfig("losses")`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    POSITIONAL: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *args: Any, **values: Any) -> None:
        name = type(self).__name__
        if len(args) > len(self.POSITIONAL):
            by_position = f" ({', '.join(self.POSITIONAL)})" if self.POSITIONAL else ""
            raise TypeError(f"{name}() takes {len(self.POSITIONAL)} positional arguments{by_position}; "
                            f"{len(args)} were given: give the others by name")
        for field, value in zip(self.POSITIONAL, args):
            if field in values:
                raise TypeError(f"{name}() got {field!r} both by position and by name")
            values[field] = value
        try:
            super().__init__(**values)
        except pydantic.ValidationError as exc:
            raise as_validation_error(exc, type(self)) from None


def build(model: type, field: str, **values: Any):
    """Build a spec model from a user's values, errors naming `field` (the argument they came in)."""
    try:
        return model.model_validate(values)
    except pydantic.ValidationError as exc:
        raise as_validation_error(exc, model, field) from None
