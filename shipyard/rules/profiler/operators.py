"""The operators of the detailed torch.profiler traces (shipyard.runtime.profiler.detailed writes them), summed
per trace file for OverallFrameworkMetrics and the report: CPU operator time vs GPU operator time, and
each operator's calls and total time.

What counts:
- CPU operators are torch.profiler's `cpu_op` events (aten::*, autograd::engine::evaluate_function: *,
  ...). They nest (aten::linear calls aten::addmm, which calls aten::mm ...), so the CPU operator time
  of the CPU/GPU split counts only the top-level cpu_op events of each thread: a nested operator's time
  is already in its caller's. Annotations (`user_annotation`: ProfilerStep#n, Optimizer.step#...) and the
  CUDA runtime calls (`cuda_runtime`: cudaLaunchKernel, ...) are not operators.
- GPU operators are the `kernel`, `gpu_memcpy` and `gpu_memset` events: GPU work does not nest.
- An operator's own total (for the most expensive operators) is its inclusive time: aten::linear
  includes its aten::addmm. Where an operator calls itself, only the outermost call is timed (all are
  counted as calls), so no operator's total exceeds its device's operator time."""

from __future__ import annotations

import json
import posixpath
import re
from collections import defaultdict
from dataclasses import dataclass, field

from shipyard.contract.profiler import DETAILED_DIR

CPU_CATEGORIES = frozenset({"cpu_op"})
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
TOP = 10  # operators per device in the summary
# <node>-rank<r>.pt.trace.json (detailed.py's names); a partial export is written under a dot name first.
_TRACE_NAME = re.compile(r"^(?P<node>[^.].*)-rank(?P<rank>\d+)\.pt\.trace\.json$")


@dataclass
class OperatorTrace:
    """One detailed trace (one process, one step range), summed."""

    node: str
    rank: int
    cpu: float = 0.0  # seconds of top-level CPU operators
    gpu: float = 0.0  # seconds of GPU kernels, copies and sets
    operators: dict[tuple[str, str], list] = field(default_factory=dict)  # (device, name) -> [calls, seconds]


def is_detailed_trace(rel: str) -> bool:
    """Whether a path relative to the profiler output is a finished detailed trace."""
    return rel.startswith(DETAILED_DIR + "/") and bool(_TRACE_NAME.match(posixpath.basename(rel)))


def parse_detailed_trace(text: str, path: str) -> OperatorTrace:
    """The operator times of one exported trace (`path` names its node and rank)."""
    match = _TRACE_NAME.match(posixpath.basename(path))
    trace = OperatorTrace(node=match.group("node") if match else "", rank=int(match.group("rank")) if match else 0)
    document = json.loads(text)
    events = document.get("traceEvents", []) if isinstance(document, dict) else document
    threads: dict[tuple, list[dict]] = defaultdict(list)
    for event in events:
        if event.get("ph") != "X":
            continue
        category = event.get("cat")
        if category in CPU_CATEGORIES:
            threads[event.get("pid"), event.get("tid")].append(event)
        elif category in GPU_CATEGORIES:
            duration = event.get("dur", 0) / 1e6
            trace.gpu += duration
            _add(trace, "GPU", str(event.get("name", "")), duration, True)
    for thread in threads.values():
        thread.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))  # a caller before the operators it calls
        open_: list[tuple[float, str]] = []  # (end µs, name) of the enclosing operators
        for event in thread:
            start, duration, name = event["ts"], event.get("dur", 0), str(event.get("name", ""))
            while open_ and open_[-1][0] <= start:
                open_.pop()
            if not open_:
                trace.cpu += duration / 1e6
            _add(trace, "CPU", name, duration / 1e6, all(n != name for _, n in open_))
            open_.append((start + duration, name))
    return trace


def _add(trace: OperatorTrace, device: str, name: str, seconds: float, timed: bool) -> None:
    entry = trace.operators.setdefault((device, name), [0, 0.0])
    entry[0] += 1
    entry[1] += seconds if timed else 0.0


def summary(traces: list[OperatorTrace]) -> dict | None:
    """Over these traces: CPU and GPU operator seconds, their shares (%) and the TOP operators of each device
    by total time ({"name", "calls", "total_ms", "share": % of the device's operator time}); None without
    traces."""
    if not traces:
        return None
    cpu, gpu = sum(t.cpu for t in traces), sum(t.gpu for t in traces)
    merged: dict[tuple[str, str], list] = defaultdict(lambda: [0, 0.0])
    for t in traces:
        for key, (calls, seconds) in t.operators.items():
            merged[key][0] += calls
            merged[key][1] += seconds
    total = cpu + gpu  # shares as 100 * (part / total): exactly 100 when the other part is 0
    top = {}
    for device, device_total in (("CPU", cpu), ("GPU", gpu)):
        ranked = sorted(((name, calls, seconds) for (d, name), (calls, seconds) in merged.items() if d == device),
                        key=lambda op: (-op[2], op[0]))[:TOP]
        top[device] = [{"name": name, "calls": calls, "total_ms": 1000 * seconds,
                        "share": 100 * (seconds / device_total) if device_total else 0.0}
                       for name, calls, seconds in ranked]
    return {"traces": len(traces), "cpu": cpu, "gpu": gpu, "cpu_share": 100 * (cpu / total) if total else 0.0,
            "gpu_share": 100 * (gpu / total) if total else 0.0, "top": top}
