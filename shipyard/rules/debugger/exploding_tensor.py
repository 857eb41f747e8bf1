"""ExplodingTensor: a tensor with a NaN or infinite element (only NaN with only_nan=True)."""

from __future__ import annotations

import numpy as np

from shipyard.rules.debugger.base import Rule, tensors_at
from shipyard.spec.rule_parameters import Parameter

PARAMETERS = {
    "collection_names": Parameter("list", None, "collections to inspect (all tensors when unset)"),
    "tensor_regex": Parameter("str", None, "tensors to inspect, by regex"),
    "only_nan": Parameter("bool", False, "ignore infinities"),
}
COLLECTIONS: dict[str, dict[str, str]] = {}


class ExplodingTensor(Rule):
    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        for name in tensors_at(self.base_trial, step, p["collection_names"], p["tensor_regex"]):
            value = self.base_trial.tensor(name).value(step)
            bad = np.isnan(value) if p["only_nan"] else ~np.isfinite(value)
            if bad.any():
                self.finding = f"tensor {name}: {int(bad.sum())} of {value.size} elements are not finite"
                return True
        return False


RULE = ExplodingTensor
