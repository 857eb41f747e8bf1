"""What every profiler rule shares: the Finding it returns, the scan interval parameter, the condition
message SageMaker writes, and statistics helpers (percentages that add up to 100 among them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from shipyard.spec.rule_parameters import Parameter

# Every SageMaker profiler rule takes it; rules here look at everything collected so far on each poll.
SCAN_INTERVAL = {"scan_interval_us": Parameter("int", 60_000_000, "how often SageMaker scans new data (µs)")}


@dataclass
class Finding:
    triggered: bool
    datapoints: int = 0
    violations: int = 0
    details: str = ""  # what triggered it (the metric, the node), or why nothing could be evaluated
    step: int | None = None  # the step at which the condition was met, when the rule is about steps
    stats: dict = field(default_factory=dict)  # for the report


def condition_message(rule: str, finding: Finding) -> str:
    where = f" at step {finding.step}" if finding.step is not None else ""
    return f"Evaluation of the rule {rule}{where} resulted in the condition being met: {finding.details}"


def percentile(values, q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else 0.0


def summary(values) -> dict[str, float]:
    """max, p99, p95, p50, min, as SageMaker's report tables give them."""
    if not len(values):
        return {}
    return {"max": float(max(values)), "p99": percentile(values, 99), "p95": percentile(values, 95),
            "p50": percentile(values, 50), "min": float(min(values))}


def percentages(parts: dict[str, float], decimals: int = 0) -> dict[str, float]:
    """Each part's share of their sum in %, rounded to `decimals` so that the shares shown add up to exactly
    100 (largest remainder: the units lost to rounding go to the parts that lost most); {} when the sum is 0."""
    parts = {name: max(value, 0.0) for name, value in parts.items()}
    total, unit = sum(parts.values()), 10 ** decimals
    if total <= 0:
        return {}
    exact = {name: 100 * unit * value / total for name, value in parts.items()}
    shares = {name: int(value) for name, value in exact.items()}
    for name in sorted(exact, key=lambda n: shares[n] - exact[n])[:100 * unit - sum(shares.values())]:
        shares[name] += 1
    return {name: share / unit for name, share in shares.items()}


def bottlenecks(data, gpu_threshold: float, busy) -> tuple[int, int]:
    """(snapshots, bottlenecks): snapshots where some GPU is below gpu_threshold while `busy(records)`."""
    datapoints = count = 0
    for _, _, records in data.snapshots():
        datapoints += 1
        gpu_idle = any(r["Type"] == "gpu" and r["Dimension"] == "GPUUtilization" and r["Value"] < gpu_threshold
                       for r in records)
        count += gpu_idle and busy(records)
    return datapoints, count


def any_above(records, type_: str, dimension: str, threshold: float) -> bool:
    return any(r["Type"] == type_ and r["Dimension"] == dimension and r["Value"] > threshold for r in records)


NO_GPU = "no GPU on any instance: there is no GPU utilisation to evaluate"


def bottleneck_finding(data, params: dict, metric: str, threshold: str, busy: str) -> Finding:
    """CPUBottleneck and IOBottleneck: once there are more than `patience` snapshots, fires when more than
    `threshold` % of them had a GPU below gpu_threshold while some core's `metric` was above
    params[threshold]."""
    datapoints, count = bottlenecks(data, params["gpu_threshold"],
                                    lambda records: any_above(records, "cpu", metric, params[threshold]))
    ratio = 100.0 * count / datapoints if datapoints else 0.0
    triggered = datapoints > params["patience"] and ratio > params["threshold"]
    return Finding(triggered, datapoints, count,
                   f"{count} of {datapoints} snapshots ({ratio:.1f}%) had a GPU below "
                   f"{params['gpu_threshold']:g}% while {busy} above {params[threshold]:g}%",
                   stats={"ratio": ratio})
