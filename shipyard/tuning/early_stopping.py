"""SageMaker's early stopping `Auto`, the median stopping rule (spec C.4), as a decision: after each
epoch a running trial is stopped when its objective there is worse than the median, over the trials
before it that reached that epoch, of their running averages up to it."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def should_stop(value: float, epoch: int, earlier: Sequence[Sequence[float]], minimize: bool) -> bool:
    """`value`: the trial's objective at `epoch` (from 1); `earlier`: each earlier trial's objective per
    epoch. No earlier trial reached the epoch: go on."""
    averages = [sum(curve[:epoch]) / epoch for curve in earlier if len(curve) >= epoch]
    if not averages:
        return False
    median = statistics.median(averages)
    return value > median if minimize else value < median
