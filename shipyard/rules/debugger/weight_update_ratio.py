"""WeightUpdateRatio: ratio = ||W_s - W_prev||_2 / (||W_prev||_2 + epsilon) between a weight at a training
step s and at the training step saved before it (no older than s - num_steps when num_steps is given);
fires if the ratio is above `large_threshold` or below `small_threshold`. Only TRAIN steps count: the
weights saved at an evaluation step have not been updated, and a zero ratio there would be no finding."""

from __future__ import annotations

import numpy as np

from shipyard.rules.debugger.base import Rule, step_in_mode
from shipyard.spec.rule_parameters import Parameter

PARAMETERS = {
    "num_steps": Parameter("int", None, "the previous step must be at most this many steps back"),
    "large_threshold": Parameter("float", 10.0),
    "small_threshold": Parameter("float", 1e-8),
    "epsilon": Parameter("float", 1e-9),
}
COLLECTIONS = {"weights": {"save_interval": "500"}}


class WeightUpdateRatio(Rule):
    def __init__(self, base_trial, **parameters) -> None:
        super().__init__(base_trial, **parameters)
        self.previous: dict[str, tuple[int, np.ndarray]] = {}  # weight -> (train step, value) last seen

    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        train_step = step_in_mode(self.base_trial, step, "train")
        if train_step is None:
            return False
        met = False
        for name in self.base_trial.tensor_names(step=step, collection="weights"):
            value = self.base_trial.tensor(name).value(step)
            before = self.previous.get(name)
            self.previous[name] = (train_step, value)
            if before is None or (p["num_steps"] is not None and train_step - before[0] > p["num_steps"]):
                continue
            ratio = float(np.linalg.norm(value - before[1]) / (np.linalg.norm(before[1]) + p["epsilon"]))
            if not met and (ratio > p["large_threshold"] or ratio < p["small_threshold"]):
                self.finding = (f"tensor {name}: update ratio {ratio:.3g} between train steps {before[0]} and "
                                f"{train_step} is outside [{p['small_threshold']:g}, {p['large_threshold']:g}]")
                met = True
        return met


RULE = WeightUpdateRatio
