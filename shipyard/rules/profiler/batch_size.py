"""BatchSize: per node, once there are more than `window` and more than `patience` snapshots and the p95
of the last `window` CPU totals (core sum / cores) is below cpu_threshold_p95, a GPU whose p95
utilisation and p95 memory (last `window`) are both below their thresholds is a violation."""

from __future__ import annotations

from shipyard.rules.profiler.base import NO_GPU, SCAN_INTERVAL, Finding, percentile
from shipyard.spec.rule_parameters import Parameter

DESCRIPTION = "Detects instances underused by a small batch: CPU, GPU and GPU memory all low."
RECOMMENDATION = "Use a larger batch size, or a smaller instance."
PARAMETERS = {
    "cpu_threshold_p95": Parameter("float", 70.0, "p95 CPU utilisation (%) below which the CPUs are underused"),
    "gpu_threshold_p95": Parameter("float", 70.0, "p95 GPU utilisation (%) below which a GPU is underused"),
    "gpu_memory_threshold_p95": Parameter("float", 70.0, "p95 GPU memory (%) below which it is underused"),
    "patience": Parameter("int", 1000, "snapshots to see before the rule may fire"),
    "window": Parameter("int", 500, "how many recent values are looked at"),
    **SCAN_INTERVAL,
}
COLLECTIONS = ()


def evaluate(data, params: dict, now: float, final: bool) -> Finding:
    window, problems, datapoints, seen = params["window"], [], 0, 0
    for node in data.nodes:
        cpu = []
        for _, _, records in data.snapshots(node):
            cores = [r["Value"] for r in records if r["Type"] == "cpu" and r["Dimension"] == "CPUUtilization"]
            if cores:
                cpu.append(sum(cores) / len(cores))
        utilisation = data.series(node, "gpu", "GPUUtilization")
        memory = data.series(node, "gpu", "GPUMemoryUtilization")
        seen += len(utilisation)
        datapoints += len(cpu)
        if len(cpu) <= max(window, params["patience"]) or percentile(cpu[-window:], 95) >= params["cpu_threshold_p95"]:
            continue
        for gpu, points in sorted(utilisation.items()):
            used = percentile([v for _, v in points[-window:]], 95)
            mem = percentile([v for _, v in memory.get(gpu, [])[-window:]], 95)
            if used < params["gpu_threshold_p95"] and mem < params["gpu_memory_threshold_p95"]:
                problems.append(f"{node} {gpu}: p95 utilisation {used:.0f}%, p95 memory {mem:.0f}%, "
                                f"p95 CPU {percentile(cpu[-window:], 95):.0f}%")
    if not seen:
        return Finding(False, datapoints, details=NO_GPU)
    return Finding(bool(problems), datapoints, len(problems), "; ".join(problems) or "the instances are well used")
