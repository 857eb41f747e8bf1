"""SaturatedActivation: a tanh or sigmoid unit is active on a sample when its input lies inside
(threshold_<act>_min, threshold_<act>_max), where the activation's gradient is above about 1e-7; a unit
active on fewer than `threshold_inactivity` % of the samples is saturated, and the rule fires when more
than `threshold_layer` % of a layer's units are (SageMaker documents the parameters; this reading of them
is the DeadRelu computation, shared). A tensor is judged with the tanh bounds when its name contains
"tanh", the sigmoid bounds when it contains "sigmoid", and skipped otherwise."""

from __future__ import annotations

from shipyard.rules.debugger.base import Rule, inactive_units_percent, tensors_at, tensors_by_regex
from shipyard.spec.rule_parameters import Parameter

DEFAULT_REGEX = ".*tanh_input|.*sigmoid_input"
PARAMETERS = {
    "collection_names": Parameter("list", None),
    "tensor_regex": Parameter("str", DEFAULT_REGEX),
    "threshold_tanh_min": Parameter("float", -9.4999),
    "threshold_tanh_max": Parameter("float", 9.4999),
    "threshold_sigmoid_min": Parameter("float", -23.0),
    "threshold_sigmoid_max": Parameter("float", 16.99999),
    "threshold_inactivity": Parameter("float", 1.0),
    "threshold_layer": Parameter("float", 50.0),
}
COLLECTIONS = {"tanh_input": {"save_interval": "500"}, "sigmoid_input": {"save_interval": "500"}}


class SaturatedActivation(Rule):
    def _names(self, step: int) -> list[str]:
        p = self.parameters
        names = set(tensors_by_regex(self.base_trial, step, p["tensor_regex"], DEFAULT_REGEX, tuple(COLLECTIONS)))
        if p["collection_names"]:
            names.update(tensors_at(self.base_trial, step, p["collection_names"]))
        return sorted(names)

    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        for name in self._names(step):
            kind = next((k for k in ("tanh", "sigmoid") if k in name.lower()), None)
            value = self.base_trial.tensor(name).value(step)
            if kind is None or value.ndim < 2:
                continue
            low, high = p[f"threshold_{kind}_min"], p[f"threshold_{kind}_max"]
            saturated = inactive_units_percent((value > low) & (value < high), p["threshold_inactivity"])
            if saturated > p["threshold_layer"]:
                self.finding = f"tensor {name}: {saturated:.1f}% of {kind} units are saturated"
                return True
        return False


RULE = SaturatedActivation
