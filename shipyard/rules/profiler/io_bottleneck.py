"""IOBottleneck: as CPUBottleneck, with "some core's I/O wait is above io_threshold" in place of a busy
core: once there are more than `patience` snapshots, fires when more than `threshold` % of them had a GPU
below gpu_threshold while waiting for I/O."""

from __future__ import annotations

from shipyard.rules.profiler.base import SCAN_INTERVAL, Finding, bottleneck_finding
from shipyard.spec.rule_parameters import Parameter

DESCRIPTION = "Checks whether the GPUs wait for I/O: low GPU utilisation while CPU cores wait for I/O."
RECOMMENDATION = ("Read data from faster storage or in larger blocks, use more data loader workers, or "
                  "prefetch data.")
PARAMETERS = {
    "threshold": Parameter("float", 50.0, "% of snapshots that must be bottlenecks"),
    "gpu_threshold": Parameter("float", 10.0, "GPU utilisation (%) below which a GPU is idle"),
    "io_threshold": Parameter("float", 50.0, "I/O wait (%) above which a core waits for I/O"),
    "patience": Parameter("int", 1000, "snapshots to see before the rule may fire"),
    **SCAN_INTERVAL,
}
COLLECTIONS = ()


def evaluate(data, params: dict, now: float, final: bool) -> Finding:
    return bottleneck_finding(data, params, "I/OWaitPercentage", "io_threshold", "a core waited for I/O")
