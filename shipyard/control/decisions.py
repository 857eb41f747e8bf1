"""What the controller's policies decide, one value each. Policies (failures.py, policies.py, the
watchers) look and return a decision; the controller (controller.py) acts on it and moves the job to
the state the decision names. Tests check decisions without running anything."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Complete:
    """Every instance exited 0."""


@dataclass(frozen=True)
class Fail:
    reason: str          # the job's FailureReason


@dataclass(frozen=True)
class Retry:
    reason: str          # a platform failure, with retries left (RetryStrategy)


@dataclass(frozen=True)
class Interrupt:
    host: str | None     # the one instance whose capacity went (it is replaced, the others rejoin); None: all


@dataclass(frozen=True)
class Stop:
    secondary: str       # Stopped | MaxRuntimeExceeded | MaxWaitTimeExceeded
    message: str


Decision = Complete | Fail | Retry | Interrupt | Stop
