"""StepOutlier: per node, once there are more than 100 step durations, a step is an outlier when it
takes longer than mean + stddev × std of that node's steps; fires when more than n_outliers are."""

from __future__ import annotations

from shipyard.rules.parameters import Parameter
from shipyard.rules.profiler.base import SCAN_INTERVAL, Finding, summary

DESCRIPTION = ("Detects outliers in step duration: a step that takes longer than the mean plus stddev "
               "standard deviations of the node's step durations.")
RECOMMENDATION = ("Check for jobs or processes running beside training, data loading that stalls, or "
                  "checkpointing inside the step loop.")
PARAMETERS = {
    "stddev": Parameter("float", 3.0, "how many standard deviations above the mean make an outlier"),
    "mode": Parameter("str", None, "TRAIN or EVAL (only TRAIN steps are recorded)"),
    "n_outliers": Parameter("int", 10, "how many outliers are tolerated before the rule fires"),
    **SCAN_INTERVAL,
}
COLLECTIONS = ()
MIN_STEPS = 100


def evaluate(data, params: dict, now: float, final: bool) -> Finding:
    import numpy as np

    datapoints, violations, stats, fired = 0, 0, {}, None
    for node in data.nodes:
        steps = data.step_durations(node)
        datapoints += len(steps)
        if len(steps) <= MIN_STEPS:
            continue
        durations = np.array([s.duration for s in steps])
        limit = durations.mean() + params["stddev"] * durations.std()
        outliers = [s for s in steps if s.duration > limit]
        normal = durations[durations <= limit]
        violations += len(outliers)
        stats[node] = {**summary(list(durations)), "mean": float(durations.mean()), "limit": float(limit),
                       "outliers": [(s.step, s.duration) for s in outliers], "normal_p50": float(np.median(normal))}
        if len(outliers) > params["n_outliers"] and fired is None:
            step = outliers[params["n_outliers"]]
            fired = Finding(True, details=f"{len(outliers)} step(s) on {node} took longer than {limit:.3f}s "
                            f"(mean {durations.mean():.3f}s + {params['stddev']:g} std); the longest "
                            f"{max(s.duration for s in outliers):.3f}s", step=step.step)
    finding = fired or Finding(False, details=f"{datapoints} steps, {violations} outliers")
    finding.datapoints, finding.violations, finding.stats = datapoints, violations, stats
    return finding
