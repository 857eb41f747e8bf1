"""The one exception hierarchy of shipyard.

    ShipyardError
    ├── ValidationError      bad user input, raised before anything runs (names field, value, fix)
    ├── NotFoundError        no job (or other record) by that name
    ├── ConflictError        a name already taken, a state change that is not allowed now
    ├── CapacityError        this machine (or cluster) cannot provide what the job asks for
    ├── StorageError         a URI no filesystem handles, a transfer that failed, an unsafe archive
    ├── SandboxError         an instance sandbox could not be created
    ├── StoreVersionError    the store was written by a newer shipyard (a schema version unknown here)
    └── UnexpectedStatusError  a waited-for job ended in a status other than Completed

ValidationError is also a ValueError, NotFoundError a KeyError, so callers that catch the builtin
types keep working.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ShipyardError(Exception):
    """Base of every error shipyard raises on purpose."""


class ValidationError(ShipyardError, ValueError):
    """`value` is Ellipsis for a rule about several fields together (the message names them). A long
    value is cut in the message, so the fix is not lost at the end of a dump."""

    def __init__(self, field: str, value: object, fix: str) -> None:
        self.field, self.value, self.fix = field, value, fix
        super().__init__(f"{field}: {fix}" if value is ... else f"{field}={_shown(value)}: {fix}")


def _shown(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class NotFoundError(ShipyardError, KeyError):
    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class ConflictError(ShipyardError):
    pass


class CapacityError(ShipyardError):
    pass


class StorageError(ShipyardError):
    pass


class SandboxError(ShipyardError):
    pass


class StoreVersionError(ShipyardError):
    def __init__(self, path: object, version: int, known: int) -> None:
        self.path, self.version, self.known = path, version, known
        super().__init__(f"the store {path} has schema version {version}, written by a newer shipyard; this one "
                         f"knows versions up to {known}: upgrade shipyard, or set SHIPYARD_HOME to another directory")


class UnexpectedStatusError(ShipyardError):
    def __init__(self, job_name: str, status: str, reason: str | None) -> None:
        self.job_name, self.status, self.reason = job_name, status, reason
        super().__init__(f"job {job_name} ended {status}" + (f": {reason}" if reason else ""))


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate a misspelling most likely meant, for 'did you mean' messages."""
    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.5)
    return found[0] if found else None


def unknown_name_error(field: str, value: str, valid: Iterable[str]) -> ValidationError:
    valid = sorted(valid)
    guess = closest(value, valid)
    fix = f"did you mean {guess!r}?" if guess else f"use one of {', '.join(valid)}"
    return ValidationError(field, value, f"unknown name; {fix}")
