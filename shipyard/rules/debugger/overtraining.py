"""Overtraining: tracks the best training loss and the best validation loss; a value is a new optimum only
when it is lower than the best by more than `delta` (absolute). Fires when `patience_train` saved TRAIN
steps, or `patience_validation` saved EVAL steps, pass without a new optimum: training has stopped
improving, or the validation loss has (SageMaker documents the parameters, not the exact rule; this is
its reading). The loss is the `losses` collection."""

from __future__ import annotations

from shipyard.rules.debugger.base import Rule, mean_loss
from shipyard.spec.rule_parameters import Parameter

PARAMETERS = {
    "patience_train": Parameter("int", 5),
    "patience_validation": Parameter("int", 10),
    "delta": Parameter("float", 0.01),
}
COLLECTIONS = {"losses": {"train.save_interval": "100", "eval.save_interval": "10"}}
PATIENCE = {"train": "patience_train", "eval": "patience_validation"}


class Overtraining(Rule):
    def __init__(self, base_trial, **parameters) -> None:
        super().__init__(base_trial, **parameters)
        self.best: dict[str, tuple[int, float]] = {}  # mode -> (mode step, loss) of its best optimum
        self.stale: dict[str, int] = {}  # mode -> saved steps since that optimum

    def invoke_at_step(self, step: int) -> bool:
        mode, mode_step = self.base_trial.mode_of(step)
        found = mean_loss(self.base_trial, step)
        if mode not in PATIENCE or found is None:
            return False
        names, loss = found
        best = self.best.get(mode)
        if best is None or loss < best[1] - self.parameters["delta"]:
            self.best[mode], self.stale[mode] = (mode_step, loss), 0
            return False
        self.stale[mode] += 1
        patience = self.parameters[PATIENCE[mode]]
        if self.stale[mode] >= patience:
            self.finding = (f"tensor {names}: {mode} loss {loss:.4g} at {mode} step {mode_step}; no new optimum "
                            f"(by more than {self.parameters['delta']:g}) in {self.stale[mode]} saved {mode} "
                            f"steps since {best[1]:.4g} at {mode} step {best[0]}")
            return True
        return False


RULE = Overtraining
