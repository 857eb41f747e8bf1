"""MaxInitializationTime: fires when no training step has been recorded more than `threshold` minutes
after the first profiler data point."""

from __future__ import annotations

from shipyard.rules.profiler.base import SCAN_INTERVAL, Finding
from shipyard.spec.rule_parameters import Parameter

DESCRIPTION = "Checks that the training loop starts within threshold minutes."
RECOMMENDATION = ("Long initialisation: download less data up front (stream it), install dependencies in "
                  "the image rather than from requirements.txt, or check the script's setup code.")
PARAMETERS = {
    "threshold": Parameter("float", 20.0, "minutes allowed before the first step"),
    **SCAN_INTERVAL,
}
COLLECTIONS = ()


def evaluate(data, params: dict, now: float, final: bool) -> Finding:
    first = data.first_timestamp
    if first is None:
        return Finding(False, details="no profiler data yet")
    limit = params["threshold"] * 60
    if data.steps:
        start = min(s.start for s in data.steps)
        return Finding(False, len(data.steps), 0, f"the first step started {start - first:.1f}s after the first data point",
                       stats={"initialization_seconds": start - first, "first_step": start,
                              "last_step": max(s.start + s.duration for s in data.steps)})
    waited = (data.last_timestamp if final else now) - first
    return Finding(waited > limit, 0, int(waited > limit),
                   f"no training step {waited / 60:.1f} minutes after the first data point (threshold "
                   f"{params['threshold']:g} minutes)", stats={"initialization_seconds": waited})
