"""Dataloader: per node, the number of cores is the number of distinct cpuN names in its system metrics;
for each second (by event start) the number of distinct processes that emitted DataLoaderWorker or
DataLoaderIter events is counted, and the median over the history taken (as an int, as SageMaker
does). Once a node has more than `patience` such seconds, a median below cores × min_threshold / 100 or
above cores × max_threshold / 100 is a violation. It also reports num_workers and pin_memory (from
DataLoaderIterInitialize) and the p25/p50/p95 of the dataloading time (the events' durations)."""

from __future__ import annotations

from collections import defaultdict

from shipyard.contract.profiler import DATALOADER_INIT, DATALOADER_ITER, DATALOADER_WORKER
from shipyard.rules.profiler.base import SCAN_INTERVAL, Finding, percentile
from shipyard.spec.rule_parameters import Parameter

DESCRIPTION = ("Checks how many data loader processes run in parallel and whether that matches the "
               "instance's CPU cores.")
RECOMMENDATION = ("Too few: raise the DataLoader's num_workers (towards the number of cores) and use "
                  "pin_memory=True on GPUs. Too many: lower num_workers, as the processes compete for the cores.")
PARAMETERS = {
    "min_threshold": Parameter("float", 70.0, "% of the cores that should at least run data loading"),
    "max_threshold": Parameter("float", 200.0, "% of the cores that should at most run data loading"),
    "patience": Parameter("int", 10, "seconds with dataloader events to see before the rule may fire"),
    **SCAN_INTERVAL,
}
COLLECTIONS = ()
LOADING = (DATALOADER_ITER, DATALOADER_WORKER)


def _cores(data, node: str) -> int:
    return len({r["Name"] for r in data.system
                if r["NodeId"] == node and r["Type"] == "cpu" and r["Dimension"] == "CPUUtilization"})


def node_stats(data, node: str) -> dict | None:
    """What the rule and the report know of one node's data loading; None without dataloader events."""
    import numpy as np

    events = data.framework_events(node, LOADING)
    if not events:
        return None
    per_second: dict[int, set[int]] = defaultdict(set)
    for event in events:
        per_second[int(event.start)].add(event.os_pid)
    times = [e.duration for e in events]
    stats = {"cores": _cores(data, node), "seconds": len(per_second),
             "dataloaders": int(np.median([len(p) for p in per_second.values()])),
             "processes": len({e.os_pid for e in events}),
             "dataloading_time": {f"p{q}": percentile(times, q) for q in (25, 50, 95)},
             "events": {name: sum(e.name == name for e in events) for name in LOADING}}
    for init in data.framework_events(node, (DATALOADER_INIT,)):
        for key in ("num_workers", "pin_memory"):
            if key in init.args:
                stats[key] = init.args[key]
    return stats


def evaluate(data, params: dict, now: float, final: bool) -> Finding:
    problems, notes, datapoints, stats = [], [], 0, {}
    for node in data.nodes:
        found = node_stats(data, node)
        if found is None:
            continue
        stats[node] = found
        datapoints += sum(found["events"].values())
        cores, median = found["cores"], found["dataloaders"]
        low, high = cores * params["min_threshold"] / 100, cores * params["max_threshold"] / 100
        note = f"{node}: median {median} parallel dataloader processes for {cores} cores"
        if "num_workers" in found:
            note += f" (num_workers={found['num_workers']}, pin_memory={found.get('pin_memory')})"
        notes.append(note)
        if found["seconds"] <= params["patience"] or not cores:
            continue
        if median < low:
            problems.append(f"{note}, below {params['min_threshold']:g}% of the cores ({low:g})")
        elif median > high:
            problems.append(f"{note}, above {params['max_threshold']:g}% of the cores ({high:g})")
    if not stats:
        return Finding(False, details="no dataloader events: the scripts take no batches from a torch DataLoader, "
                                      "or framework profiling is off")
    return Finding(bool(problems), datapoints, len(problems), "; ".join(problems or notes), stats=stats)
