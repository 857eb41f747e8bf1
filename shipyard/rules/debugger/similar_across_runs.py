"""SimilarAcrossRuns: fires if a tensor differs (numpy.allclose with its default tolerances fails, or the
shapes differ) between this trial and another at the same global step. `other_trials` is a
comma-separated list of job names, paths or URIs (SageMaker's other_trial_<i>); a step the other trial
has not saved (yet) is not compared."""

from __future__ import annotations

import numpy as np

from shipyard.rules.debugger.base import Rule, tensors_at
from shipyard.spec.rule_parameters import Parameter

PARAMETERS = {
    "other_trials": Parameter("list", None, "job names, paths or URIs of the trials to compare with"),
    "collection_names": Parameter("list", None),
    "tensor_regex": Parameter("str", None),
}
COLLECTIONS: dict[str, dict[str, str]] = {}


def check(values: dict) -> None:
    if not values.get("other_trials"):
        raise ValueError("rule SimilarAcrossRuns needs other_trials: the job names, paths or URIs of the "
                         "trials to compare with, comma-separated")


class SimilarAcrossRuns(Rule):
    def __init__(self, base_trial, **parameters) -> None:
        super().__init__(base_trial, **parameters)
        from shipyard.rules.debugger.trials import trial

        self.others = [(where, trial(where)) for where in parameters["other_trials"]]

    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        names = tensors_at(self.base_trial, step, p["collection_names"], p["tensor_regex"])
        for where, other in self.others:
            if step not in other.steps():
                continue
            theirs = set(other.tensor_names(step=step))
            for name in names:
                if name not in theirs:
                    continue
                mine, their = self.base_trial.tensor(name).value(step), other.tensor(name).value(step)
                if mine.shape != their.shape or not np.allclose(mine, their, equal_nan=True):
                    self.finding = f"tensor {name} at step {step} differs from {where}"
                    return True
        return False


RULE = SimilarAcrossRuns
