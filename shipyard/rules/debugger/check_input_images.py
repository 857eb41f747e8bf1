"""CheckInputImages: accumulates the per-channel sum of the model's input images (NCHW, the channel axis
being `channel`) across steps; once at least `threshold_samples` images have been seen, fires if a
channel's mean magnitude exceeds `threshold_mean`: the input is not zero-centred. Tensors with fewer
than 3 axes are not images and are skipped. Left at SageMaker's default `regex` (an MXNet name), the
images are the `input_image` collection: the root module's input."""

from __future__ import annotations

import numpy as np

from shipyard.rules.debugger.base import Rule, tensors_by_regex
from shipyard.spec.rule_parameters import Parameter

DEFAULT_REGEX = ".*hybridsequential0_input_0"
PARAMETERS = {
    "threshold_mean": Parameter("float", 0.2),
    "threshold_samples": Parameter("int", 500),
    "regex": Parameter("str", DEFAULT_REGEX),
    "channel": Parameter("int", 1),
}
COLLECTIONS = {"input_image": {"save_interval": "500"}}


class CheckInputImages(Rule):
    def __init__(self, base_trial, **parameters) -> None:
        super().__init__(base_trial, **parameters)
        self.sums: dict[str, np.ndarray] = {}  # tensor -> per-channel sum of its values so far
        self.counts: dict[str, int] = {}  # tensor -> values per channel summed so far
        self.images: dict[str, int] = {}

    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        for name in tensors_by_regex(self.base_trial, step, p["regex"], DEFAULT_REGEX, tuple(COLLECTIONS)):
            value = self.base_trial.tensor(name).value(step)
            if value.ndim < 3 or value.ndim <= p["channel"]:
                continue
            per_channel = np.moveaxis(value.astype(np.float64), p["channel"], 0).reshape(value.shape[p["channel"]], -1)
            self.sums[name] = self.sums.get(name, 0) + per_channel.sum(axis=1)
            self.counts[name] = self.counts.get(name, 0) + per_channel.shape[1]
            self.images[name] = self.images.get(name, 0) + value.shape[0]
            if self.images[name] < p["threshold_samples"]:
                continue
            means = self.sums[name] / self.counts[name]
            worst = int(np.abs(means).argmax())
            if abs(means[worst]) > p["threshold_mean"]:
                self.finding = (f"tensor {name}: channel {worst} mean {means[worst]:.3g} over "
                                f"{self.images[name]} images (|mean| > {p['threshold_mean']:g})")
                return True
        return False


RULE = CheckInputImages
