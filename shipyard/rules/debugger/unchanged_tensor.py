"""UnchangedTensor: fires if a tensor's values at the last `num_steps` saved steps where it was saved (not
necessarily consecutive) are all numpy.allclose to the newest, with `rtol`, `atol` and `equal_nan`."""

from __future__ import annotations

from collections import deque

import numpy as np

from shipyard.rules.debugger.base import Rule, tensors_at
from shipyard.spec.rule_parameters import Parameter

PARAMETERS = {
    "collection_names": Parameter("list", None),
    "tensor_regex": Parameter("str", None),
    "num_steps": Parameter("int", 3),
    "rtol": Parameter("float", 1e-5),
    "atol": Parameter("float", 1e-8),
    "equal_nan": Parameter("bool", False),
}
COLLECTIONS: dict[str, dict[str, str]] = {}


class UnchangedTensor(Rule):
    def __init__(self, base_trial, **parameters) -> None:
        super().__init__(base_trial, **parameters)
        self.recent: dict[str, deque] = {}  # tensor -> (step, value) of its last num_steps saved steps

    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        met = False
        for name in tensors_at(self.base_trial, step, p["collection_names"], p["tensor_regex"]):
            recent = self.recent.setdefault(name, deque(maxlen=p["num_steps"]))
            newest = self.base_trial.tensor(name).value(step)
            recent.append((step, newest))
            if met or len(recent) < p["num_steps"]:
                continue
            if all(v.shape == newest.shape and np.allclose(v, newest, rtol=p["rtol"], atol=p["atol"],
                                                            equal_nan=p["equal_nan"]) for _s, v in recent):
                self.finding = f"tensor {name}: unchanged over steps {', '.join(str(s) for s, _v in recent)}"
                met = True
        return met


RULE = UnchangedTensor
