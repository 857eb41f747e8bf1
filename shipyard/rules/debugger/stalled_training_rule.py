"""StalledTrainingRule: fires if no new step has been saved for `threshold` seconds, counted from the last
new step the rule saw (from the rule's start before the first). The watcher asks it between steps too
(`invoke_without_step`), so a job that hangs is caught while it hangs; a step that arrives after such a
gap fires as well. With `stop_training_on_fire` the rule also stops the job (a StopTraining action of its
own: the job ends Stopped, the rule named). SageMaker stops a job only when exactly one in-progress job
matches `training_job_name_prefix`; here the rule stops the job it watches, and the prefix is accepted
and unused."""

from __future__ import annotations

import time

from shipyard.rules.debugger.base import Rule
from shipyard.spec.rule_parameters import Parameter

PARAMETERS = {
    "threshold": Parameter("int", 1800, "seconds without a new step"),
    "stop_training_on_fire": Parameter("bool", False),
    "training_job_name_prefix": Parameter("str", None),
}
COLLECTIONS: dict[str, dict[str, str]] = {}


class StalledTrainingRule(Rule):
    clock = staticmethod(time.monotonic)

    def __init__(self, base_trial, **parameters) -> None:
        super().__init__(base_trial, **parameters)
        if parameters["stop_training_on_fire"]:
            from shipyard.spec.rules import StopTraining

            self.actions = (StopTraining(),)
        self.last_step: int | None = None
        self.last_seen = self.clock()

    def _stalled(self, now: float) -> bool:
        idle = now - self.last_seen
        if idle <= self.parameters["threshold"]:
            return False
        after = "the rule started" if self.last_step is None else f"step {self.last_step}"
        self.finding = f"no new step for {idle:.0f} s after {after} (threshold {self.parameters['threshold']} s)"
        return True

    def invoke_at_step(self, step: int) -> bool:
        now = self.clock()
        met = self._stalled(now)
        self.last_step, self.last_seen = step, now
        return met

    def invoke_without_step(self) -> bool:
        return self._stalled(self.clock())


RULE = StalledTrainingRule
