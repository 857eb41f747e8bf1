"""Where the profiler's data lies under /opt/ml/output/profiler (and its profiler-output copy), as
SageMaker lays it out: written by the recorders in the instance (shipyard/runtime/profiler/), read by the
rules and the report (shipyard/rules/profiler/data.py). See docs/profiler.md."""

from __future__ import annotations

import posixpath
import time

SYSTEM_DIR = "system/incremental"
FRAMEWORK_DIR = "framework/pevents"
DETAILED_DIR = "framework/pytorch/detailed_profiling"
STEP_PREFIX = "Step:ModeKeys."
# The dataloader's events (SageMaker's PyTorch names).
DATALOADER_INIT, DATALOADER_ITER, DATALOADER_WORKER = "DataLoaderIterInitialize", "DataLoaderIter", "DataLoaderWorker"


def system_file(root: str, node: str, timestamp: float) -> str:
    """SageMaker's name: system/incremental/<YYYYMMDDHH>/<epoch seconds of the minute>.<node>.json."""
    hour = time.strftime("%Y%m%d%H", time.gmtime(timestamp))
    minute = int(timestamp) - int(timestamp) % 60
    return posixpath.join(root, SYSTEM_DIR, hour, f"{minute}.{node}.json")
