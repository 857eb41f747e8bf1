"""Job names as SageMaker validates and generates them."""

from __future__ import annotations

import datetime as _dt
import re

from shipyard.errors import ValidationError

JOB_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
CHANNEL_NAME_RE = re.compile(r"^[A-Za-z0-9.\-_]{1,64}$")
_TIMESTAMP_RE = re.compile(r"-\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}-\d{3}$")
MAX_JOB_NAME = 63


def validate_job_name(name: str, field: str = "job_name") -> str:
    if not isinstance(name, str) or not JOB_NAME_RE.match(name):
        raise ValidationError(
            field, name,
            "1-63 characters, letters, digits and hyphens, starting and ending with a letter or digit",
        )
    return name


def generate_job_name(base: str, now: _dt.datetime | None = None) -> str:
    """`<base>-YYYY-MM-DD-HH-MM-SS-mmm` (UTC), base cut so the whole stays within 63 characters."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    stamp = now.strftime("%Y-%m-%d-%H-%M-%S-") + f"{now.microsecond // 1000:03d}"
    base = base[: MAX_JOB_NAME - len(stamp) - 1].rstrip("-")
    return validate_job_name(f"{base}-{stamp}", "base_job_name")


def base_of(job_name: str) -> str:
    """The base a generated name was made from (what `attach` recovers)."""
    return _TIMESTAMP_RE.sub("", job_name)
