"""PoorWeightInitialization, over the steps before `steps`: fires (a) when the variances of the
activation inputs differ across layers by more than a factor `threshold` (max / min at one step),
(b) when the gradients of a step, all together, spread less than `distribution_range` between their 5th
and 95th percentiles, or (c) when the loss has not reached a new minimum for `patience` steps."""

from __future__ import annotations

import numpy as np

from shipyard.rules.debugger.base import Rule, mean_loss, tensors_by_regex
from shipyard.spec.rule_parameters import Parameter

DEFAULT_REGEX = ".*relu_input"
PARAMETERS = {
    "activation_inputs_regex": Parameter("str", DEFAULT_REGEX),
    "threshold": Parameter("float", 10.0),
    "distribution_range": Parameter("float", 0.001),
    "patience": Parameter("int", 5),
    "steps": Parameter("int", 10),
}
# relu_input as in ruleConfigs.json; check (b) needs the gradients, and the losses are always saved.
COLLECTIONS = {"relu_input": {"save_interval": "500"}, "gradients": {"save_interval": "500"}}


class PoorWeightInitialization(Rule):
    def __init__(self, base_trial, **parameters) -> None:
        super().__init__(base_trial, **parameters)
        self.best: tuple[int, float] | None = None  # (step, loss) of the lowest loss so far

    def _variance_ratio(self, step: int) -> bool:
        p = self.parameters
        names = tensors_by_regex(self.base_trial, step, p["activation_inputs_regex"], DEFAULT_REGEX,
                                 ("relu_input",))
        variances = {n: float(np.var(self.base_trial.tensor(n).value(step))) for n in names}
        if len(variances) < 2:
            return False
        low, high = min(variances, key=variances.get), max(variances, key=variances.get)
        if variances[high] > p["threshold"] * variances[low]:
            self.finding = (f"tensors {high} and {low}: activation input variance {variances[high]:.3g} is "
                            f"more than {p['threshold']:g} times {variances[low]:.3g}")
            return True
        return False

    def _gradient_range(self, step: int) -> bool:
        names = self.base_trial.tensor_names(step=step, collection="gradients")
        if not names:
            return False
        values = np.concatenate([self.base_trial.tensor(n).value(step).ravel() for n in names])
        spread = float(np.percentile(values, 95) - np.percentile(values, 5))
        if spread < self.parameters["distribution_range"]:
            self.finding = (f"gradients {', '.join(names)}: 5th to 95th percentile range {spread:.3g} < "
                            f"{self.parameters['distribution_range']:g}")
            return True
        return False

    def _loss_stalled(self, step: int) -> bool:
        found = mean_loss(self.base_trial, step)
        if found is None:
            return False
        names, loss = found
        if self.best is None or loss < self.best[1]:
            self.best = (step, loss)
        elif step - self.best[0] >= self.parameters["patience"]:
            self.finding = (f"tensor {names}: loss {loss:.6g} at step {step}, no lower than {self.best[1]:.6g} "
                            f"at step {self.best[0]}")
            return True
        return False

    def invoke_at_step(self, step: int) -> bool:
        if step >= self.parameters["steps"]:
            return False
        return self._variance_ratio(step) or self._gradient_range(step) or self._loss_stalled(step)


RULE = PoorWeightInitialization
