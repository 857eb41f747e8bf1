"""ClassImbalance: counts the labels of each class (and the mispredictions, where predictions are saved
at the same step) across steps; once `samples` labels have been seen, fires if the most frequent class
outnumbers the least frequent (of the classes seen) by more than `threshold_imbalance` times, or if a
class's mispredicted fraction exceeds `threshold_misprediction`."""

from __future__ import annotations

from collections import Counter

from shipyard.rules.debugger.base import Rule, as_classes, tensors_at
from shipyard.spec.rule_parameters import Parameter

PARAMETERS = {
    "threshold_imbalance": Parameter("float", 10.0),
    "threshold_misprediction": Parameter("float", 0.7),
    "samples": Parameter("int", 500),
    "argmax": Parameter("bool", False),
    "labels_regex": Parameter("str", ".*labels"),
    "predictions_regex": Parameter("str", ".*predictions"),
}
COLLECTIONS = {"labels": {"save_interval": "500"}, "predictions": {"save_interval": "500"}}


class ClassImbalance(Rule):
    def __init__(self, base_trial, **parameters) -> None:
        super().__init__(base_trial, **parameters)
        self.counts: Counter = Counter()  # class -> labels seen
        self.wrong: Counter = Counter()  # class -> labels seen with another prediction
        self.judged: Counter = Counter()  # class -> labels seen with a prediction

    def invoke_at_step(self, step: int) -> bool:
        p, trial = self.parameters, self.base_trial
        labels = tensors_at(trial, step, None, p["labels_regex"])
        if not labels:
            return False
        truth = as_classes(trial.tensor(labels[0]).value(step), p["argmax"])
        self.counts.update(truth.tolist())
        predictions = tensors_at(trial, step, None, p["predictions_regex"])
        if predictions:
            guess = as_classes(trial.tensor(predictions[0]).value(step), p["argmax"])
            if guess.shape == truth.shape:
                self.judged.update(truth.tolist())
                self.wrong.update(truth[guess != truth].tolist())
        if sum(self.counts.values()) < p["samples"]:
            return False
        (big, most), (small, least) = self.counts.most_common()[0], self.counts.most_common()[-1]
        if most > p["threshold_imbalance"] * least:
            self.finding = (f"tensor {labels[0]}: class {big} has {most} samples, class {small} {least} "
                            f"(more than {p['threshold_imbalance']:g} times)")
            return True
        for label, seen in sorted(self.judged.items()):
            fraction = self.wrong[label] / seen
            if fraction > p["threshold_misprediction"]:
                self.finding = (f"tensor {predictions[0]}: class {label} is mispredicted in {fraction:.0%} "
                                f"of {seen} samples")
                return True
        return False


RULE = ClassImbalance
