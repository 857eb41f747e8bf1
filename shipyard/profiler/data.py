"""The profiler's data as stored under a job's profiler-output (see docs/profiler.md), read back for the
rules and the report: system metrics (SageMaker's JSON lines) and step events with their dataloader
wait (Chrome trace files).

`ProfilerReader` reads a URI incrementally: a file is read again only when its size changed (the current
minute's system file is rewritten as it grows), so a watcher can poll it every few seconds."""

from __future__ import annotations

import json
import posixpath
from collections import defaultdict
from dataclasses import dataclass, field

# smdebug treats events less than 20 ms apart as one snapshot.
SNAPSHOT_SECONDS = 0.02
SYSTEM_DIR = "system/incremental"
FRAMEWORK_DIR = "framework/pevents"


@dataclass(frozen=True)
class StepEvent:
    node: str
    pid: int
    step: int
    start: float  # epoch seconds
    duration: float  # seconds
    dataloader: float = 0.0  # seconds of it spent waiting for DataLoader batches


@dataclass
class ProfilerData:
    system: list[dict] = field(default_factory=list)  # {"Type","Name","Dimension","Value","NodeId","Timestamp"}
    steps: list[StepEvent] = field(default_factory=list)

    @property
    def nodes(self) -> list[str]:
        return sorted({r["NodeId"] for r in self.system} | {s.node for s in self.steps})

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

    def step_durations(self, node: str) -> list[StepEvent]:
        return sorted((s for s in self.steps if s.node == node), key=lambda s: (s.start, s.pid))

    @property
    def first_timestamp(self) -> float | None:
        times = [r["Timestamp"] for r in self.system] + [s.start for s in self.steps]
        return min(times) if times else None

    @property
    def last_timestamp(self) -> float | None:
        times = [r["Timestamp"] for r in self.system] + [s.start + s.duration for s in self.steps]
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


def parse_trace(text: str) -> list[StepEvent]:
    """Step events of one Chrome trace file: 'ph': 'X' events named Step:ModeKeys.*, with `ts` relative
    to the process_name metadata event's start_time_since_epoch_in_micros."""
    events = json.loads(text)
    base = 0
    for event in events:
        if event.get("ph") == "M" and event.get("name") == "process_name":
            base = event.get("args", {}).get("start_time_since_epoch_in_micros", 0)
    waits: dict[tuple[int, int], float] = defaultdict(float)
    for event in events:
        if event.get("ph") == "X" and event.get("name") == "DataLoaderIter":
            waits[int(event.get("pid", 0)), int(event.get("args", {}).get("step_num", 0))] += event["dur"] / 1e6
    steps = []
    for event in events:
        if event.get("ph") == "X" and str(event.get("name", "")).startswith("Step:"):
            args = event.get("args", {})
            pid, step = int(event.get("pid", 0)), int(args.get("step_num", 0))
            steps.append(StepEvent(node=args.get("node", ""), pid=pid, step=step, start=(base + event["ts"]) / 1e6,
                                   duration=event["dur"] / 1e6, dataloader=waits.get((pid, step), 0.0)))
    return steps


class ProfilerReader:
    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._sizes: dict[str, int] = {}
        self._system: dict[str, list[dict]] = {}
        self._steps: dict[str, list[StepEvent]] = {}

    def read(self) -> ProfilerData:
        """Everything under the URI now, reading only files that are new or changed."""
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
            if not rel.endswith(".json") or self._sizes.get(rel) == size:
                continue
            try:
                with fs.open(name, "r") as f:
                    text = f.read()
                if rel.startswith(SYSTEM_DIR + "/"):
                    self._system[rel] = parse_system(text)
                elif rel.startswith(FRAMEWORK_DIR + "/"):
                    self._steps[rel] = parse_trace(text)
            except (OSError, ValueError):
                continue  # read again next time
            self._sizes[rel] = size
        if hasattr(fs, "invalidate_cache"):
            fs.invalidate_cache(root)
        return ProfilerData(system=[r for rs in self._system.values() for r in rs],
                            steps=[s for ss in self._steps.values() for s in ss])


def system_file(root: str, node: str, timestamp: float) -> str:
    """SageMaker's name: system/incremental/<YYYYMMDDHH>/<epoch seconds of the minute>.<node>.json."""
    import time

    hour = time.strftime("%Y%m%d%H", time.gmtime(timestamp))
    minute = int(timestamp) - int(timestamp) % 60
    return posixpath.join(root, SYSTEM_DIR, hour, f"{minute}.{node}.json")
