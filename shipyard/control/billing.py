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

from shipyard.spec.catalog import InstanceType


def billing(spec, start: float | None, end: float | None, attempts: list[dict],
            instance_type: InstanceType | None, now: float | None = None) -> dict:
    now = now or time.time()
    if start is None:
        return {"TrainingTimeInSeconds": None, "BillableTimeInSeconds": None}
    training = (end or now) - start
    running = sum((a["end_time"] or end or now) - a["start_time"] for a in attempts)
    on_demand = instance_type.on_demand_usd_per_hour if instance_type else 0.0
    spot = instance_type.spot_usd_per_hour if instance_type else 0.0
    billable = running
    if spec.use_spot_instances and on_demand > 0:
        billable = running * spot / on_demand
    price = spot if spec.use_spot_instances else on_demand
    instance_hours = running * spec.instance_count / 3600
    result = {
        "TrainingTimeInSeconds": int(round(training)),
        "BillableTimeInSeconds": int(round(billable)),
        "Cost": {
            "Currency": "USD",
            "Amount": round(instance_hours * price, 6),
            "OnDemandAmount": round(instance_hours * on_demand, 6),
            "InstanceSeconds": round(running * spec.instance_count, 3),
        },
    }
    if spec.use_spot_instances and training > 0:
        result["ManagedSpotTrainingSavings"] = round((1 - billable / training) * 100, 1)
    return result
