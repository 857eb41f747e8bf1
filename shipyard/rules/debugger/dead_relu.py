"""DeadRelu: a ReLU unit is dead when its output is positive on fewer than `threshold_inactivity` % of
the samples in the batch; fires when more than `threshold_layer` % of a layer's units are dead."""

from __future__ import annotations

from shipyard.rules.debugger.base import Rule
from shipyard.rules.parameters import Parameter

PARAMETERS = {
    "tensor_regex": Parameter("str", ".*relu_output"),
    "threshold_inactivity": Parameter("float", 1.0),
    "threshold_layer": Parameter("float", 50.0),
}
COLLECTIONS = {"relu_output": {"include_regex": ".*relu_output", "save_interval": "500"}}


class DeadRelu(Rule):
    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        for name in self.base_trial.tensor_names(step=step, regex=p["tensor_regex"]):
            value = self.base_trial.tensor(name).value(step)
            if value.ndim < 2:
                continue
            active = (value > 0).reshape(value.shape[0], -1).mean(axis=0) * 100  # % of samples, per unit
            dead = float((active < p["threshold_inactivity"]).mean() * 100)
            if dead > p["threshold_layer"]:
                self.finding = f"tensor {name}: {dead:.1f}% of units are dead"
                return True
        return False


RULE = DeadRelu
