"""NLPSequenceRatio: for each of `token_values`, its share of all the tokens in a step's input sequences,
in %; fires if it exceeds the paired `token_thresholds_percent` (too much padding or UNK). Left at
SageMaker's default `tensor_regex` (an MXNet name), the sequences are the `input_sequence` collection:
the inputs of embedding layers."""

from __future__ import annotations

import numpy as np

from shipyard.rules.debugger.base import Rule, tensors_by_regex
from shipyard.spec.rule_parameters import Parameter

DEFAULT_REGEX = ".*embedding0_input_0"
PARAMETERS = {
    "tensor_regex": Parameter("str", DEFAULT_REGEX),
    "token_values": Parameter("list", ("0",), "token ids, comma-separated"),
    "token_thresholds_percent": Parameter("list", ("50",), "one % per token value, comma-separated"),
}
COLLECTIONS = {"input_sequence": {"save_interval": "500"}}


def _numbers(name: str, texts) -> list[float]:
    try:
        return [float(t) for t in texts]
    except ValueError:
        raise ValueError(f"rule NLPSequenceRatio: {name} must be comma-separated numbers, got "
                         f"{','.join(texts)!r}") from None


def check(values: dict) -> list[tuple[float, float]]:
    """(token value, threshold %) pairs; ValueError when they are not numbers or do not pair up."""
    tokens = _numbers("token_values", values["token_values"])
    limits = _numbers("token_thresholds_percent", values["token_thresholds_percent"])
    if len(tokens) != len(limits):
        raise ValueError(f"rule NLPSequenceRatio: {len(tokens)} token_values but {len(limits)} "
                         "token_thresholds_percent; give one threshold per token value")
    return list(zip(tokens, limits))


class NLPSequenceRatio(Rule):
    def __init__(self, base_trial, **parameters) -> None:
        super().__init__(base_trial, **parameters)
        self.pairs = check(parameters)

    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        for name in tensors_by_regex(self.base_trial, step, p["tensor_regex"], DEFAULT_REGEX, tuple(COLLECTIONS)):
            value = self.base_trial.tensor(name).value(step)
            if not value.size:
                continue
            for token, limit in self.pairs:
                share = float(np.count_nonzero(value == token) / value.size * 100)
                if share > limit:
                    self.finding = f"tensor {name}: token {token:g} is {share:.1f}% of {value.size} tokens (> {limit:g}%)"
                    return True
        return False


RULE = NLPSequenceRatio
