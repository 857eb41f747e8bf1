"""RetryStrategy: `max_retry_attempts` bounds how often a job restarts after platform failures (an
instance agent that died, a lost node, a controller that died), never after the script's own failure.
Each restart is recorded as one `retry` event, whoever decided it (the controller, or the command that
found the controller dead), so the count is the same from every process. Spot interruptions are not
retries."""

from __future__ import annotations

RETRY_EVENT = "retry"


def may_retry(store, name: str, max_retry_attempts: int) -> bool:
    return len(store.events(name, kind=RETRY_EVENT)) < max_retry_attempts


def record_retry(store, name: str, reason: str) -> str:
    """Count this restart and return the Starting message that announces it."""
    store.add_event(name, RETRY_EVENT, reason.splitlines()[0])
    used = len(store.events(name, kind=RETRY_EVENT))
    spec = store.get_job(name).spec
    return f"Retrying after a platform failure (retry {used} of {spec.max_retry_attempts})"
