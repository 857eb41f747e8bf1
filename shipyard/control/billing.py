"""What a job cost, as SageMaker counts it, priced from the instance catalog.

- TrainingTimeInSeconds: wall time from the first attempt's start to the end, interruptions and
  waiting for capacity included.
- BillableTimeInSeconds: the seconds charged per instance: the attempts' running time (waiting for
  capacity is not billed); for spot jobs scaled by the spot/on-demand price ratio, which is how
  SageMaker's savings figure `(1 - billable / training) * 100` comes to reflect the spot discount.
- Cost: running instance-seconds at the spot or on-demand price, next to what on-demand would have
  cost for the same running time."""

from __future__ import annotations

import time
from collections.abc import Callable

from shipyard.spec.catalog import InstanceType


def billing(spec, start: float | None, end: float | None, attempts: list[dict],
            instance_type: Callable[[str], InstanceType | None], now: float | None = None) -> dict:
    """`instance_type`: the catalog's entry for a type name (None: unknown, no price). A heterogeneous
    job's groups are each priced at their own type's price, and listed under Cost.InstanceGroups."""
    now = now or time.time()
    if start is None:
        return {"TrainingTimeInSeconds": None, "BillableTimeInSeconds": None}
    training = (end or now) - start
    running = sum((a["end_time"] or end or now) - a["start_time"] for a in attempts)
    groups = [(g, instance_type(g["instance_type"]), len(g["hosts"])) for g in spec.groups]
    # USD per hour of the whole job, on demand and spot.
    on_demand = sum(count * it.on_demand_usd_per_hour for _, it, count in groups if it)
    spot = sum(count * it.spot_usd_per_hour for _, it, count in groups if it)
    billable = running
    if spec.use_spot_instances and on_demand > 0:
        billable = running * spot / on_demand
    hours = running / 3600
    result = {
        "TrainingTimeInSeconds": int(round(training)),
        "BillableTimeInSeconds": int(round(billable)),
        "Cost": {
            "Currency": "USD",
            "Amount": round(hours * (spot if spec.use_spot_instances else on_demand), 6),
            "OnDemandAmount": round(hours * on_demand, 6),
            "InstanceSeconds": round(running * spec.instance_count, 3),
        },
    }
    if spec.instance_groups:
        result["Cost"]["InstanceGroups"] = [
            {"InstanceGroupName": g["instance_group_name"], "InstanceType": g["instance_type"], "InstanceCount": count,
             "Amount": round(hours * count * ((it.spot_usd_per_hour if spec.use_spot_instances else
                                               it.on_demand_usd_per_hour) if it else 0.0), 6)}
            for g, it, count in groups]
    if spec.use_spot_instances and training > 0:
        result["ManagedSpotTrainingSavings"] = round((1 - billable / training) * 100, 1)
    return result
