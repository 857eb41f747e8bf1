"""Where spot interruptions come from on the local backend: a simulator configured per job (at given
times, at a random rate) and requests from `shipyard spot interrupt`. A policy only returns
decisions; the controller acts on them."""

from __future__ import annotations

import random

from shipyard.spec.job import JobSpec


class SpotSimulator:
    def __init__(self, spec: JobSpec) -> None:
        self.simulation = spec.spot_simulation
        self.random = random.Random(self.simulation.seed if self.simulation else None)

    def interruption_after(self, attempt: int) -> float | None:
        """Seconds after the attempt's instances start at which capacity is taken, or None."""
        if self.simulation is None:
            return None
        scheduled = self.simulation.interruptions_at
        if attempt <= len(scheduled):
            return scheduled[attempt - 1]
        if self.simulation.rate_per_hour > 0:
            return self.random.expovariate(self.simulation.rate_per_hour / 3600.0)
        return None

    def capacity_delay(self) -> float:
        return self.simulation.capacity_delay_seconds if self.simulation else 0.0
