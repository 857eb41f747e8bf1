"""CPUBottleneck: a snapshot is a bottleneck when some GPU is below gpu_threshold while some CPU core
is above cpu_threshold; once there are more than `patience` snapshots, fires when the bottlenecks are
more than `threshold` % of them. Without GPUs no snapshot can be a bottleneck."""

from __future__ import annotations

from shipyard.rules.profiler.base import SCAN_INTERVAL, Finding, bottleneck_finding
from shipyard.spec.rule_parameters import Parameter

DESCRIPTION = "Checks whether the GPUs wait for the CPUs: low GPU utilisation while a CPU core is busy."
RECOMMENDATION = ("Use more data loader workers, move preprocessing out of the training loop or onto the "
                  "GPU, or pick an instance with more CPUs per GPU.")
PARAMETERS = {
    "threshold": Parameter("float", 50.0, "% of snapshots that must be bottlenecks"),
    "gpu_threshold": Parameter("float", 10.0, "GPU utilisation (%) below which a GPU is idle"),
    "cpu_threshold": Parameter("float", 90.0, "CPU core utilisation (%) above which a core is busy"),
    "patience": Parameter("int", 1000, "snapshots to see before the rule may fire"),
    **SCAN_INTERVAL,
}
COLLECTIONS = ()


def evaluate(data, params: dict, now: float, final: bool) -> Finding:
    return bottleneck_finding(data, params, "CPUUtilization", "cpu_threshold", "a CPU core was")
