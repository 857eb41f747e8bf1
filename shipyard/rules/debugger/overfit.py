"""Overfit: r = (mean validation loss - mean training loss) / mean training loss, at each EVAL step from
`start_step` (a global step) on; fires when r > `ratio_threshold` at `patience` EVAL steps in a row. The
validation mean is over the saved EVAL steps of the current evaluation phase so far; the training mean
over the TRAIN steps saved in the training phase before it (the last one that saved any). A new phase
starts when the mode changes, or when steps of another mode came between two saved steps (their global
steps are further apart than their mode steps), so phases that saved nothing in between do not merge. The loss is the
`losses` collection, or the tensors matching `tensor_regex`."""

from __future__ import annotations

from shipyard.rules.debugger.base import Rule, mean_loss
from shipyard.spec.rule_parameters import Parameter

PARAMETERS = {
    "tensor_regex": Parameter("str", None),
    "start_step": Parameter("int", 0),
    "patience": Parameter("int", 1),
    "ratio_threshold": Parameter("float", 0.1),
}
# As SageMaker's docs configure it: the training loss now and then, the validation loss often.
COLLECTIONS = {"losses": {"train.save_interval": "100", "eval.save_interval": "10"}}


class Overfit(Rule):
    def __init__(self, base_trial, **parameters) -> None:
        super().__init__(base_trial, **parameters)
        self.train: list[float] = []  # losses of the last training phase that saved any
        self.phase: list[float] = []  # losses of the current phase (training or evaluation)
        self.phase_mode = ""
        self.last: tuple[int, int] | None = None  # (global step, mode step) of the phase's last saved loss
        self.over = 0  # EVAL steps in a row with r above the threshold

    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        mode, mode_step = self.base_trial.mode_of(step)
        found = mean_loss(self.base_trial, step, p["tensor_regex"])
        if step < p["start_step"] or found is None or mode not in ("train", "eval"):
            return False
        names, loss = found
        contiguous = self.last is not None and step - self.last[0] == mode_step - self.last[1]
        if mode != self.phase_mode or not contiguous:
            self.phase_mode, self.phase = mode, []
            if mode == "train":
                self.train = self.phase
        self.phase.append(loss)
        self.last = (step, mode_step)
        if mode != "eval" or not self.train:
            return False
        train = sum(self.train) / len(self.train)
        validation = sum(self.phase) / len(self.phase)
        ratio = (validation - train) / max(abs(train), 1e-12)
        self.over = self.over + 1 if ratio > p["ratio_threshold"] else 0
        if self.over >= p["patience"]:
            self.finding = (f"tensor {names}: mean validation loss {validation:.4g} (to eval step {mode_step}) "
                            f"against mean training loss {train:.4g}: ratio {ratio:.3g} > "
                            f"{p['ratio_threshold']:g}")
            return True
        return False


RULE = Overfit
