"""The controller's policies that look at the clock and the job's requests: max_run and max_wait, the
budget (max_cost), spot interruptions (scheduled by the simulator or requested), hangs. Each returns a decision (decisions.py)
or None; the controller acts."""

from __future__ import annotations

from shipyard.control.decisions import Fail, Interrupt, Stop
from shipyard.control.hangs import find_hang


def max_wait_spent(spec, since_first_start: float) -> Stop | None:
    """Spot jobs: waiting for capacity plus running is bounded by max_wait."""
    if spec.max_wait is not None and since_first_start > spec.max_wait:
        return Stop("MaxWaitTimeExceeded", f"MaxWaitTimeInSeconds {spec.max_wait} exceeded")
    return None


def timeouts(spec, run_seconds: float, since_first_start: float) -> Stop | None:
    """`run_seconds`: the running time of every attempt so far, this one's included."""
    if run_seconds > spec.max_run:
        return Stop("MaxRuntimeExceeded", f"MaxRuntimeInSeconds {spec.max_run} exceeded")
    return max_wait_spent(spec, since_first_start)


def budget(spec, cost: float, rate: float, stopping_seconds: float) -> Stop | None:
    """max_cost: stop while the job's cost, with what stopping it takes (`stopping_seconds` of running at
    `rate` USD per second), stays within the budget."""
    if spec.max_cost is not None and cost + rate * stopping_seconds >= spec.max_cost:
        return Stop("Stopped", f"Budget reached: max_cost ${spec.max_cost:,.2f} (the job has cost ${cost:,.4f}; "
                               f"stopping it takes up to {stopping_seconds:g} s more at ${rate * 3600:,.4f} per hour)")
    return None


def interruption(requested: str | None, scheduled_after: float | None, elapsed: float) -> Interrupt | None:
    """`requested`: a host (`shipyard spot interrupt --host`), "*" (all), or None; `scheduled_after`: when
    the simulator takes capacity, in seconds of this attempt."""
    if requested or (scheduled_after is not None and elapsed >= scheduled_after):
        return Interrupt(requested if requested not in (None, "*") else None)
    return None


def hang(beats: list[dict], now: float, timeout: float) -> Fail | None:
    reason = find_hang(beats, now, timeout)
    return Fail(f"AlgorithmError: {reason}") if reason else None
