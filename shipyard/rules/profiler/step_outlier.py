"""StepOutlier: per node (all its ranks) and per step mode (TRAIN, EVAL; only `mode` when given), once
there are more than 100 step durations, a step is an outlier when it takes longer than mean + stddev ×
std of those steps; fires when more than n_outliers are."""

from __future__ import annotations

from shipyard.rules.profiler.base import SCAN_INTERVAL, Finding, summary
from shipyard.spec.rule_parameters import Parameter

DESCRIPTION = ("Detects outliers in step duration: a step that takes longer than the mean plus stddev "
               "standard deviations of the node's step durations.")
RECOMMENDATION = ("Check for jobs or processes running beside training, data loading that stalls, or "
                  "checkpointing inside the step loop.")
PARAMETERS = {
    "stddev": Parameter("float", 3.0, "how many standard deviations above the mean make an outlier"),
    "mode": Parameter("str", None, "TRAIN or EVAL (default: each separately)"),
    "n_outliers": Parameter("int", 10, "how many outliers are tolerated before the rule fires"),
    **SCAN_INTERVAL,
}
COLLECTIONS = ()
MIN_STEPS = 100


def evaluate(data, params: dict, now: float, final: bool) -> Finding:
    """stats: node -> mode -> the steps' statistics, the limit and the outliers."""
    datapoints, violations, stats, fired = 0, 0, {}, None
    wanted = params["mode"].upper().removeprefix("MODEKEYS.") if params["mode"] else None
    for node in data.nodes:
        modes = {s.mode for s in data.step_durations(node)} if wanted is None else {wanted}
        for mode in sorted(modes):
            steps = data.step_durations(node, mode)
            datapoints += len(steps)
            if len(steps) <= MIN_STEPS:
                continue
            found = _outliers(steps, params["stddev"])
            stats.setdefault(node, {})[mode] = found
            violations += len(found["outliers"])
            if len(found["outliers"]) > params["n_outliers"] and fired is None:
                step, _ = found["outliers"][params["n_outliers"]]
                fired = Finding(True, details=f"{len(found['outliers'])} {mode} step(s) on {node} took longer than "
                                f"{found['limit']:.3f}s (mean {found['mean']:.3f}s + {params['stddev']:g} std); the "
                                f"longest {max(d for _, d in found['outliers']):.3f}s", step=step)
    finding = fired or Finding(False, details=f"{datapoints} steps, {violations} outliers")
    finding.datapoints, finding.violations, finding.stats = datapoints, violations, stats
    return finding


def _outliers(steps, stddev: float) -> dict:
    import numpy as np

    durations = np.array([s.duration for s in steps])
    limit = durations.mean() + stddev * durations.std()
    return {**summary(list(durations)), "mean": float(durations.mean()), "limit": float(limit),
            "outliers": [(s.step, s.duration) for s in steps if s.duration > limit],
            "normal_p50": float(np.median(durations[durations <= limit]))}
