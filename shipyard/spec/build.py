"""Making a spec model from what a user wrote, with shipyard's error instead of pydantic's."""

from __future__ import annotations

from typing import Any

import pydantic

from shipyard.errors import ValidationError


def build(model: type, field: str, **values: Any):
    """Build a spec model, turning pydantic's error into ours: the field, the value, the fix."""
    try:
        return model(**values)
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        value = error.get("input") if where else ...  # a rule about several fields: the message names them
        raise ValidationError(f"{field}.{where}" if where else field, value,
                              error["msg"].removeprefix("Value error, ")) from None
