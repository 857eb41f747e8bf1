"""Confusion: a confusion matrix confusion[label][prediction] accumulated across steps; fires when a
predicted class's column, normalised by its sum (that class's precision), has a diagonal share below
`min_diag` or an off-diagonal share above `max_off_diag` (SageMaker documents both checks; the column
reading is this implementation's). `category_no` fixes the number of classes, else it grows with the
largest class seen. The labels and predictions are the tensors named `labels` and `predictions`, else
the first tensor of `labels_collection` / `predictions_collection`; probability vectors are argmaxed."""

from __future__ import annotations

import numpy as np

from shipyard.rules.debugger.base import Rule, as_classes
from shipyard.spec.rule_parameters import Parameter

PARAMETERS = {
    "category_no": Parameter("int", None),
    "labels": Parameter("str", "labels"),
    "predictions": Parameter("str", "predictions"),
    "labels_collection": Parameter("str", "labels"),
    "predictions_collection": Parameter("str", "predictions"),
    "min_diag": Parameter("float", 0.9),
    "max_off_diag": Parameter("float", 0.1),
}
COLLECTIONS = {"labels": {"save_interval": "500"}, "predictions": {"save_interval": "500"}}


class Confusion(Rule):
    def __init__(self, base_trial, **parameters) -> None:
        super().__init__(base_trial, **parameters)
        n = parameters["category_no"] or 0
        self.matrix = np.zeros((n, n), dtype=np.int64)

    def _tensor(self, step: int, name: str, collection: str) -> str | None:
        names = self.base_trial.tensor_names(step=step)
        if name in names:
            return name
        found = self.base_trial.tensor_names(step=step, collection=collection)
        return found[0] if found else None

    def _add(self, truth, guess) -> None:
        top = int(max(truth.max(), guess.max())) + 1
        if top > len(self.matrix) and not self.parameters["category_no"]:
            grown = np.zeros((top, top), dtype=np.int64)
            grown[: len(self.matrix), : len(self.matrix)] = self.matrix
            self.matrix = grown
        keep = (truth < len(self.matrix)) & (guess < len(self.matrix)) & (truth >= 0) & (guess >= 0)
        np.add.at(self.matrix, (truth[keep], guess[keep]), 1)

    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        label_name = self._tensor(step, p["labels"], p["labels_collection"])
        prediction_name = self._tensor(step, p["predictions"], p["predictions_collection"])
        if label_name is None or prediction_name is None:
            return False
        truth, guess = (as_classes(v, argmax=v.ndim > 1 and v.shape[-1] > 1) for v in
                        (self.base_trial.tensor(n).value(step) for n in (label_name, prediction_name)))
        if truth.shape != guess.shape or not truth.size:
            return False
        self._add(truth, guess)
        for predicted, column in enumerate(self.matrix.T):
            total = column.sum()
            if not total:
                continue
            shares = column / total
            off = np.delete(shares, predicted)
            if shares[predicted] < p["min_diag"] or (off.size and off.max() > p["max_off_diag"]):
                self.finding = (f"tensors {label_name}, {prediction_name}: of {total} samples predicted as "
                                f"class {predicted}, {shares[predicted]:.0%} are that class (min_diag "
                                f"{p['min_diag']:g}, max_off_diag {p['max_off_diag']:g})")
                return True
        return False


RULE = Confusion
