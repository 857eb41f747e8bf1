"""The profiler's data as stored under a job's profiler-output (see docs/profiler.md), read back for the
rules and the report: system metrics (SageMaker's JSON lines), step events with their dataloader wait,
and the other framework events (Chrome trace files): the phases inside a step (Forward,
Backward(post-forward), Optimizer) and the dataloader's (DataLoaderIterInitialize, DataLoaderIter,
DataLoaderWorker) with the OS process that emitted them; and the operator times of the detailed
torch.profiler traces, summed per trace (shipyard.rules.profiler.operators).

`ProfilerReader` reads a URI incrementally: a file is read again only when its size changed (the current
minute's system file is rewritten as it grows), so a watcher can poll it every few seconds."""

from __future__ import annotations

import json
import posixpath
import re
from collections import defaultdict
from dataclasses import dataclass, field, replace

from shipyard.contract.profiler import DATALOADER_ITER, DATALOADER_WORKER, FRAMEWORK_DIR, STEP_PREFIX, SYSTEM_DIR
from shipyard.rules.profiler.operators import OperatorTrace, is_detailed_trace, parse_detailed_trace

# smdebug treats events less than 20 ms apart as one snapshot.
SNAPSHOT_SECONDS = 0.02
# <end_ts_us>_<node>[-rank<r>]_model_timeline.json: the node, for events whose args do not name it.
_TRACE_NAME = re.compile(r"^\d+_(?P<node>.+?)(?:-rank\d+)?_[a-z]+_?timeline\.json$")


@dataclass(frozen=True)
class StepEvent:
    node: str
    pid: int  # the rank
    step: int
    start: float  # epoch seconds
    duration: float  # seconds
    dataloader: float = 0.0  # seconds of it spent waiting for DataLoader batches
    mode: str = "TRAIN"  # from Step:ModeKeys.<mode>


@dataclass(frozen=True)
class FrameworkEvent:
    """Any other complete event of a trace: a phase of a step or a dataloader event."""

    name: str
    node: str
    pid: int  # the rank
    os_pid: int  # the emitting process: args.worker_pid for DataLoaderWorker, else args.os_pid (else the rank)
    step: int | None
    start: float  # epoch seconds
    duration: float  # seconds
    args: dict = field(default_factory=dict, compare=False, hash=False)


@dataclass
class ProfilerData:
    system: list[dict] = field(default_factory=list)  # {"Type","Name","Dimension","Value","NodeId","Timestamp"}
    steps: list[StepEvent] = field(default_factory=list)
    events: list[FrameworkEvent] = field(default_factory=list)
    operators: list[OperatorTrace] = field(default_factory=list)  # one per detailed trace file

    @property
    def nodes(self) -> list[str]:
        return sorted({r["NodeId"] for r in self.system} | {s.node for s in self.steps} | {e.node for e in self.events}
                      | {t.node for t in self.operators})

    def operator_traces(self, node: str | None = None) -> list[OperatorTrace]:
        return [t for t in self.operators if node is None or t.node == node]

    def framework_events(self, node: str | None = None, names=None) -> list[FrameworkEvent]:
        """Framework events (of one node, with one of `names`), in time order."""
        return sorted((e for e in self.events if (node is None or e.node == node) and (names is None or e.name in names)),
                      key=lambda e: (e.start, e.pid))

    def snapshots(self, node: str | None = None) -> list[tuple[str, float, list[dict]]]:
        """(node, timestamp, records) per snapshot, in time order."""
        by_node: dict[str, list[dict]] = defaultdict(list)
        for record in self.system:
            if node is None or record["NodeId"] == node:
                by_node[record["NodeId"]].append(record)
        out = []
        for name, records in sorted(by_node.items()):
            records.sort(key=lambda r: r["Timestamp"])
            current: list[dict] = []
            for record in records:
                if current and record["Timestamp"] - current[0]["Timestamp"] >= SNAPSHOT_SECONDS:
                    out.append((name, current[0]["Timestamp"], current))
                    current = []
                current.append(record)
            if current:
                out.append((name, current[0]["Timestamp"], current))
        out.sort(key=lambda s: (s[1], s[0]))
        return out

    def series(self, node: str, type_: str, dimension: str) -> dict[str, list[tuple[float, float]]]:
        """Name -> [(timestamp, value)] for one node's metrics of that type and dimension."""
        out: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for r in self.system:
            if r["NodeId"] == node and r["Type"] == type_ and r["Dimension"] == dimension:
                out[r["Name"]].append((r["Timestamp"], r["Value"]))
        for values in out.values():
            values.sort()
        return dict(out)

    def step_durations(self, node: str, mode: str | None = None) -> list[StepEvent]:
        """One node's steps (of every rank; of one mode, TRAIN or EVAL, when given), in time order."""
        return sorted((s for s in self.steps if s.node == node and (mode is None or s.mode == mode)),
                      key=lambda s: (s.start, s.pid))

    @property
    def first_timestamp(self) -> float | None:
        times = [r["Timestamp"] for r in self.system] + [s.start for s in self.steps] + [e.start for e in self.events]
        return min(times) if times else None

    @property
    def last_timestamp(self) -> float | None:
        times = ([r["Timestamp"] for r in self.system] + [s.start + s.duration for s in self.steps]
                 + [e.start + e.duration for e in self.events])
        return max(times) if times else None


def parse_system(text: str) -> list[dict]:
    records = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a torn line cannot happen with atomic rewrites; skip rather than fail a rule
    return records


def parse_trace(text: str, node: str = "") -> tuple[list[StepEvent], list[FrameworkEvent]]:
    """The complete ('ph': 'X') events of one Chrome trace file, `ts` being relative to the process_name
    metadata event's start_time_since_epoch_in_micros: Step:ModeKeys.* as steps (their dataloader wait
    is added by `with_dataloader_wait`, as the DataLoaderIter events may be in other files), the rest as
    framework events. `node` is used where an event's args do not name one."""
    events = json.loads(text)
    base = 0
    for event in events:
        if event.get("ph") == "M" and event.get("name") == "process_name":
            base = event.get("args", {}).get("start_time_since_epoch_in_micros", 0)
    steps, others = [], []
    for event in events:
        if event.get("ph") != "X":
            continue
        name, args, pid = str(event.get("name", "")), event.get("args") or {}, int(event.get("pid", 0))
        start, duration = (base + event["ts"]) / 1e6, event.get("dur", 0) / 1e6
        if name.startswith("Step:"):
            steps.append(StepEvent(node=args.get("node", node), pid=pid, step=int(args.get("step_num", 0)),
                                   start=start, duration=duration, mode=name.removeprefix(STEP_PREFIX)))
            continue
        step = args.get("step_num")
        os_pid = args.get("worker_pid") if name == DATALOADER_WORKER else None
        others.append(FrameworkEvent(name=name, node=args.get("node", node), pid=pid,
                                     os_pid=int(os_pid or args.get("os_pid", pid)),
                                     step=int(step) if step is not None else None, start=start, duration=duration,
                                     args=args))
    return steps, others


def with_dataloader_wait(steps: list[StepEvent], events: list[FrameworkEvent]) -> list[StepEvent]:
    """Steps with the time their rank waited for DataLoader batches (DataLoaderIter events of that step:
    of that mode too, since EVAL steps are numbered on their own)."""
    waits: dict[tuple[str, int, str, int], float] = defaultdict(float)
    for event in events:
        if event.name == DATALOADER_ITER and event.step is not None:
            waits[event.node, event.pid, event.args.get("mode", "TRAIN"), event.step] += event.duration
    return [replace(s, dataloader=waits[key]) if (key := (s.node, s.pid, s.mode, s.step)) in waits else s
            for s in steps]


def node_of_trace(path: str) -> str:
    match = _TRACE_NAME.match(posixpath.basename(path))
    return match.group("node") if match else ""


class ProfilerReader:
    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._sizes: dict[str, int] = {}
        self._system: dict[str, list[dict]] = {}
        self._traces: dict[str, tuple[list[StepEvent], list[FrameworkEvent]]] = {}
        self._operators: dict[str, OperatorTrace] = {}

    def read(self, operators: bool = True) -> ProfilerData:
        """Everything under the URI now, reading only files that are new or changed. `operators`: parse the
        detailed torch.profiler traces too (large on a GPU: the rules want them only at the end)."""
        from shipyard.storage.uri import filesystem

        fs, root = filesystem(self.uri)
        root = root.rstrip("/")
        try:
            found = fs.find(root, detail=True) if fs.exists(root) else {}
        except FileNotFoundError:
            found = {}
        for name, info in found.items():
            rel = name[len(root) + 1:]
            size = info.get("size")
            system, detailed = rel.startswith(SYSTEM_DIR + "/"), is_detailed_trace(rel)
            # Python stats are not read. A detailed trace is written once, whole, so it is parsed once and
            # only its sums are kept.
            if (not system and not detailed and not rel.startswith(FRAMEWORK_DIR + "/")) or not rel.endswith(".json") \
                    or self._sizes.get(rel) == size or (detailed and not operators):
                continue
            try:
                with fs.open(name, "r") as f:
                    text = f.read()
                if system:
                    self._system[rel] = parse_system(text)
                elif detailed:
                    try:
                        self._operators[rel] = parse_detailed_trace(text, rel)
                    except ValueError:
                        raise  # not whole yet: read again next time
                    except Exception:  # a trace torch wrote in a shape we do not know: no operators from it
                        self._operators.pop(rel, None)
                else:
                    self._traces[rel] = parse_trace(text, node_of_trace(rel))
            except (OSError, ValueError):
                continue  # read again next time
            self._sizes[rel] = size
        if hasattr(fs, "invalidate_cache"):
            fs.invalidate_cache(root)
        events = [e for _, es in self._traces.values() for e in es]
        return ProfilerData(system=[r for rs in self._system.values() for r in rs],
                            steps=with_dataloader_wait([s for ss, _ in self._traces.values() for s in ss], events),
                            events=events, operators=list(self._operators.values()))

