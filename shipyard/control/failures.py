"""Classifying an instance that failed: whose failure it is (the script's, or the platform's), what
the job's FailureReason says, and what to do about it. Pure apart from reading the instance's failure
file and log."""

from __future__ import annotations

from pathlib import Path

from shipyard.control.decisions import Fail, Interrupt, Retry
from shipyard.runtime.failure import error_excerpt, only_peer_lost

MAX_FAILURE_REASON = 1024


def failure_reason(instance, code: int) -> str:
    """What the instance's agent wrote (the script's error, as the toolkit reports it), or, when the agent
    itself died, a platform error with the end of the instance's log."""
    failure = instance.plan.ml_dir / "output" / "failure"
    if failure.exists():
        return f"AlgorithmError: {instance.host}: {failure.read_text(errors='replace').strip()}"
    excerpt = error_excerpt(Path(instance.plan.config.log_path), budget=600)
    return f"InternalServerError: {instance.host}: the instance exited with code {code} and no failure file\n{excerpt}"


def peer_lost(instance, code: int) -> bool:
    """Whether the instance failed only because a peer went away (its collective broke): another
    instance's failure is then the cause to name."""
    return not instance.lost_reason and only_peer_lost(failure_reason(instance, code))


def classify(instance, code: int, spot: bool, retries_left: bool) -> Fail | Retry | Interrupt:
    """A lost instance of a spot job is an interruption; a platform failure is retried while retries are
    left; anything else fails the job."""
    lost = instance.lost_reason
    if lost and spot:
        return Interrupt(instance.host)
    reason = f"InternalServerError: {instance.host}: {lost}" if lost else failure_reason(instance, code)
    if reason.startswith("InternalServerError") and retries_left:
        return Retry(reason)
    return Fail(reason)
