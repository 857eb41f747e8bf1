"""VanishingGradient: a gradient whose mean absolute value falls below `threshold`."""

from __future__ import annotations

from shipyard.rules.debugger.base import Rule
from shipyard.spec.rule_parameters import Parameter

PARAMETERS = {"threshold": Parameter("float", 1e-7, "mean |gradient| below this is vanishing")}
COLLECTIONS = {"gradients": {"save_interval": "500"}}


class VanishingGradient(Rule):
    def invoke_at_step(self, step: int) -> bool:
        for name in self.base_trial.tensor_names(step=step, collection="gradients"):
            value = self.base_trial.tensor(name).value(step)
            mean_abs = float(abs(value).mean()) if value.size else 0.0
            if mean_abs < self.parameters["threshold"]:
                self.finding = f"tensor {name}: mean |gradient| {mean_abs:.3g} < {self.parameters['threshold']:g}"
                return True
        return False


RULE = VanishingGradient
