"""What jobs cost, added up (`shipyard costs`): by day, by job-name prefix or by tag, each total with what
on demand would have cost, the spot savings and the warm pools' retained time. Each job's figures are
its describe()'s `Shipyard.Cost` (control/describe.py `billed`), so the totals and the jobs always agree."""

from __future__ import annotations

import re
import time
from collections import defaultdict
from dataclasses import dataclass

from shipyard.spec.names import base_of

GROUPINGS = ("day", "prefix", "tag")
_TRIAL = re.compile(r"-\d{3}-[0-9a-f]{8}$")   # a tuning trial's suffix (tuning/trials.py job_name)
NO_TAG = "(no tag)"


@dataclass(frozen=True)
class JobCost:
    name: str
    created: float
    tags: tuple[str, ...]      # "Key=Value"
    cost: float                # what it cost: running at its price, plus its warm pool's retention
    on_demand: float           # its running time at on-demand prices
    warm_pool_retained: float

    @property
    def spot_savings(self) -> float:
        return max(0.0, self.on_demand - (self.cost - self.warm_pool_retained))


def prefix_of(name: str) -> str:
    """A job's name without what shipyard adds to it: a tuning trial's `-NNN-hash` and a generated
    name's timestamp (so every job of a base_job_name, and every trial of a tuning job, add up)."""
    return base_of(_TRIAL.sub("", name))


def job_costs(store, since: float | None = None) -> list[JobCost]:
    from shipyard.control.billing import prices
    from shipyard.control.describe import billed
    from shipyard.control.reconcile import reconcile

    priced = prices()
    records = [r for r in store.list_jobs() if since is None or r.creation_time >= since]
    attempts = store.attempts_of([r.name for r in records])
    found = []
    for record in records:
        record = record if record.terminal else reconcile(store, record.name)
        cost = billed(store, record, attempts[record.name], priced)[0].get("Cost", {})
        found.append(JobCost(
            name=record.name, created=record.creation_time,
            tags=tuple(f"{t['Key']}={t['Value']}" for t in record.spec.tags),
            cost=cost.get("Amount", 0.0), on_demand=cost.get("OnDemandAmount", 0.0),
            warm_pool_retained=cost.get("WarmPoolRetainedAmount", 0.0)))
    return found


def _keys(job: JobCost, by: str) -> tuple[str, ...]:
    if by == "day":
        return (time.strftime("%Y-%m-%d", time.localtime(job.created)),)
    if by == "prefix":
        return (prefix_of(job.name),)
    return job.tags or (NO_TAG,)   # a job with two tags counts under each


def totals(jobs: list[JobCost], by: str) -> list[dict]:
    """One row per key (days newest first; prefixes and tags costliest first, then by name), then the
    total of every job (once each, whatever the grouping)."""
    rows: dict[str, dict] = defaultdict(lambda: {"jobs": 0, "cost": 0.0, "on_demand": 0.0, "spot_savings": 0.0,
                                                 "warm_pool_retained": 0.0})
    for job in jobs:
        for key in _keys(job, by):
            _add(rows[key], job)
    if by == "day":
        ordered = sorted(rows.items(), reverse=True)
    else:
        ordered = sorted(rows.items(), key=lambda kv: (-kv[1]["cost"], kv[0]))
    total: dict = {"jobs": 0, "cost": 0.0, "on_demand": 0.0, "spot_savings": 0.0, "warm_pool_retained": 0.0}
    for job in jobs:
        _add(total, job)
    return [_rounded({by: key, **row}) for key, row in ordered] + [_rounded({by: "total", **total})]


def _add(row: dict, job: JobCost) -> None:
    row["jobs"] += 1
    for field in ("cost", "on_demand", "warm_pool_retained"):
        row[field] += getattr(job, field)
    row["spot_savings"] += job.spot_savings


def _rounded(row: dict) -> dict:
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()}

