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


def prices() -> Callable[[str], InstanceType | None]:
    """The catalog's entry for a type name; None for a type since removed from the user's catalog (no
    price), so an old job still describes."""
    from shipyard.errors import ValidationError
    from shipyard.spec.catalog import get_instance_type, load_catalog

    catalog = load_catalog()

    def priced(name: str) -> InstanceType | None:
        try:
            return get_instance_type(name, catalog)
        except ValidationError:
            return None

    return priced


def keep_alive_within(spec, cost: float, instance_type: Callable[[str], InstanceType | None]) -> float:
    """The seconds of warm pool retention (billed at the on-demand price) that max_cost leaves after the
    job's `cost`; infinite without a budget."""
    if spec.max_cost is None:
        return float("inf")
    on_demand = hourly(spec, instance_type)[0] / 3600
    return max(0.0, (spec.max_cost - cost) / on_demand) if on_demand else float("inf")


def hourly(spec, instance_type: Callable[[str], InstanceType | None]) -> tuple[float, float]:
    """USD per hour of the whole job's instances, on demand and spot (each group at its type's price)."""
    groups = [(instance_type(g["instance_type"]), len(g["hosts"])) for g in spec.groups]
    return (sum(count * it.on_demand_usd_per_hour for it, count in groups if it),
            sum(count * it.spot_usd_per_hour for it, count in groups if it))


def rate(spec, instance_type: Callable[[str], InstanceType | None]) -> float:
    """What the job costs per second of running, at the price it pays (spot's when spot)."""
    on_demand, spot = hourly(spec, instance_type)
    return (spot if spec.use_spot_instances else on_demand) / 3600


def expectation(spec, instance_type: Callable[[str], InstanceType | None]) -> str:
    """What the job is expected to cost, said before anything runs: its price per hour, what max_run
    would cost at most, and with a budget how long it buys."""
    per_hour = rate(spec, instance_type) * 3600
    types = ", ".join(f"{len(g['hosts'])} x {g['instance_type']}" for g in spec.groups)
    how = "spot" if spec.use_spot_instances else "on demand"
    text = f"expected cost: ${per_hour:,.4f} per hour ({types}, {how}); at most ${per_hour * spec.max_run / 3600:,.2f} " \
           f"in max_run ({_span(spec.max_run)})"
    if spec.max_cost is not None and per_hour:
        text += f"; max_cost ${spec.max_cost:,.2f} buys {_span(spec.max_cost / per_hour * 3600)}, then the job is stopped"
    return text


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:,.1f} h"


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
    on_demand, spot = hourly(spec, instance_type)
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
