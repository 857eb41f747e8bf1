"""DeadRelu: a ReLU unit is dead when its output is positive on fewer than `threshold_inactivity` % of
the samples in the batch; fires when more than `threshold_layer` % of a layer's units are dead."""

from __future__ import annotations

from shipyard.rules.debugger.base import Rule, inactive_units_percent, tensors_by_regex
from shipyard.spec.rule_parameters import Parameter

DEFAULT_REGEX = ".*relu_output"
PARAMETERS = {
    "tensor_regex": Parameter("str", DEFAULT_REGEX),
    "threshold_inactivity": Parameter("float", 1.0),
    "threshold_layer": Parameter("float", 50.0),
}
COLLECTIONS = {"relu_output": {"save_interval": "500"}}


class DeadRelu(Rule):
    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        for name in tensors_by_regex(self.base_trial, step, p["tensor_regex"], DEFAULT_REGEX, tuple(COLLECTIONS)):
            value = self.base_trial.tensor(name).value(step)
            if value.ndim < 2:
                continue
            dead = inactive_units_percent(value > 0, p["threshold_inactivity"])
            if dead > p["threshold_layer"]:
                self.finding = f"tensor {name}: {dead:.1f}% of units are dead"
                return True
        return False


RULE = DeadRelu
