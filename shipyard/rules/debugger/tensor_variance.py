"""TensorVariance: fires if a tensor's variance is above `max_threshold` or below `min_threshold` (at
least one must be given). The variance is the saved `variance` reduction when the hook saved reductions
only, else computed from the raw value."""

from __future__ import annotations

import numpy as np

from shipyard.rules.debugger.base import Rule, tensors_at
from shipyard.spec.rule_parameters import Parameter

PARAMETERS = {
    "collection_names": Parameter("list", None),
    "tensor_regex": Parameter("str", None),
    "max_threshold": Parameter("float", None),
    "min_threshold": Parameter("float", None),
}
COLLECTIONS: dict[str, dict[str, str]] = {}


def check(values: dict) -> None:
    if values.get("max_threshold") is None and values.get("min_threshold") is None:
        raise ValueError("rule TensorVariance needs max_threshold or min_threshold (or both)")


class TensorVariance(Rule):
    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        high, low = p["max_threshold"], p["min_threshold"]
        for name in tensors_at(self.base_trial, step, p["collection_names"], p["tensor_regex"]):
            tensor = self.base_trial.tensor(name)
            saved = tensor.reduction_values(step).get("variance")
            variance = float(saved if saved is not None else np.var(tensor.value(step)))
            if (high is not None and variance > high) or (low is not None and variance < low):
                self.finding = (f"tensor {name}: variance {variance:.3g} outside "
                                f"[{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}]")
                return True
        return False


RULE = TensorVariance
