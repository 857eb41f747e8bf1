"""SageMaker's early stopping `Auto`, the median stopping rule (spec C.4), as a decision: after each
epoch a running trial is stopped when its objective there is worse than the median, over the trials
started before it that reached that epoch, of their running averages up to it. With fewer than
MIN_EARLIER such trials the median says little (one slow starter would stop the next), so it waits."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

MIN_EARLIER = 3


def median_rule(value: float, epoch: int, earlier: Sequence[Sequence[float]], minimize: bool) -> str | None:
    """`value`: the trial's objective at `epoch` (from 1); `earlier`: each earlier trial's objective per
    epoch. The reason to stop, or None to go on."""
    averages = [sum(curve[:epoch]) / epoch for curve in earlier if len(curve) >= epoch]
    if len(averages) < MIN_EARLIER:
        return None
    median = statistics.median(averages)
    if (value > median) if minimize else (value < median):
        return (f"Early stopping (median rule): objective {value:.6g} at epoch {epoch} is "
                f"{'above' if minimize else 'below'} the median {median:.6g} of {len(averages)} earlier "
                "trials' running averages")
    return None
