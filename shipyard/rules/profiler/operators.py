"""The operators of the detailed torch.profiler traces (shipyard.runtime.profiler.detailed writes them), summed
per trace file for OverallFrameworkMetrics and the report: CPU operator time vs GPU operator time, and
each operator's calls and self time.

What counts:
- CPU operators are torch.profiler's `cpu_op` events (aten::*, autograd::engine::evaluate_function: *,
  ...). They nest (aten::linear calls aten::addmm, which calls aten::mm ...): each moment of a thread is
  given to the innermost operator running then, its self time, so an operator's time is counted once
  however deep it nests or recurses, and the self times of a device's operators add up to its operator
  time (the top-level operators' time) and their shares to 100 %. An operator that outlasts its caller
  in the trace is cut at the caller's end. Annotations (`user_annotation`: ProfilerStep#n,
  Optimizer.step#...) and the CUDA runtime calls (`cuda_runtime`: cudaLaunchKernel, ...) are not
  operators.
- GPU operators are the `kernel`, `gpu_memcpy` and `gpu_memset` events: GPU work does not nest."""

from __future__ import annotations

import json
import posixpath
import re
from collections import defaultdict
from dataclasses import dataclass, field

from shipyard.contract.profiler import DETAILED_DIR
from shipyard.rules.profiler.base import percentages

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
    operators: dict[tuple[str, str], list] = field(default_factory=dict)  # (device, name) -> [calls, self seconds]


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
            _add(trace, "GPU", str(event.get("name", "")), duration)
    for thread in threads.values():
        thread.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))  # a caller before the operators it calls
        open_: list[list] = []  # the enclosing operators: [end µs (cut at their caller's), name, self µs]
        for event in thread:
            start, name = event["ts"], str(event.get("name", ""))
            while open_ and open_[-1][0] <= start:
                _close(trace, open_.pop())
            end = start + event.get("dur", 0)
            if open_:
                end = min(end, open_[-1][0])
                open_[-1][2] -= end - start  # the caller's self time excludes this call
            else:
                trace.cpu += (end - start) / 1e6
            open_.append([end, name, end - start])
        while open_:
            _close(trace, open_.pop())
    return trace


def _close(trace: OperatorTrace, operator: list) -> None:
    _add(trace, "CPU", operator[1], operator[2] / 1e6)


def _add(trace: OperatorTrace, device: str, name: str, seconds: float) -> None:
    entry = trace.operators.setdefault((device, name), [0, 0.0])
    entry[0] += 1
    entry[1] += seconds


def summary(traces: list[OperatorTrace]) -> dict | None:
    """Over these traces: CPU and GPU operator seconds, their shares (% adding up to 100) and the TOP operators
    of each device by self time ({"name", "calls", "self_ms", "share": % of the device's operator time, one
    decimal, the shares of all its operators adding up to 100}); None without traces."""
    if not traces:
        return None
    cpu, gpu = sum(t.cpu for t in traces), sum(t.gpu for t in traces)
    merged: dict[tuple[str, str], list] = defaultdict(lambda: [0, 0.0])
    for t in traces:
        for key, (calls, seconds) in t.operators.items():
            merged[key][0] += calls
            merged[key][1] += seconds
    top = {}
    for device in ("CPU", "GPU"):
        ops = {name: (calls, seconds) for (d, name), (calls, seconds) in merged.items() if d == device}
        shares = percentages({name: seconds for name, (_, seconds) in ops.items()}, decimals=1)
        ranked = sorted(ops.items(), key=lambda op: (-op[1][1], op[0]))[:TOP]
        top[device] = [{"name": name, "calls": calls, "self_ms": 1000 * seconds, "share": shares.get(name, 0.0)}
                       for name, (calls, seconds) in ranked]
    return {"traces": len(traces), "cpu": cpu, "gpu": gpu,
            "shares": percentages({"CPU": cpu, "GPU": gpu}), "top": top}
