"""AllZero: fires if at least `threshold` % of a tensor's values are zero. The tensors are those of
collection_names and/or tensor_regex (their union); at least one must be given."""

from __future__ import annotations

import numpy as np

from shipyard.rules.debugger.base import Rule, require_tensor_choice, tensors_at
from shipyard.spec.rule_parameters import Parameter

PARAMETERS = {
    "collection_names": Parameter("list", None),
    "tensor_regex": Parameter("str", None),
    "threshold": Parameter("float", 100.0, "% of zero values"),
}
COLLECTIONS: dict[str, dict[str, str]] = {}


def check(values: dict) -> None:
    require_tensor_choice("AllZero", values)


class AllZero(Rule):
    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        for name in tensors_at(self.base_trial, step, p["collection_names"], p["tensor_regex"]):
            value = self.base_trial.tensor(name).value(step)
            if not value.size:
                continue
            zeros = float(np.count_nonzero(value == 0) / value.size * 100)
            if zeros >= p["threshold"]:
                self.finding = f"tensor {name}: {zeros:.1f}% of its {value.size} values are zero"
                return True
        return False


RULE = AllZero
