"""What every debugger rule is: SageMaker's smdebug Rule shape. A rule gets the trial and its typed
parameters; `invoke_at_step(step)` returns True when its condition is met at that step and leaves in
`self.finding` the tensor (and figure) that triggered it. Custom rules subclass this (or just follow the
same shape: a class taking `base_trial` and keyword parameters, with invoke_at_step)."""

from __future__ import annotations


class Rule:
    def __init__(self, base_trial, **parameters) -> None:
        self.base_trial = base_trial
        self.parameters = parameters
        self.finding = ""

    def invoke_at_step(self, step: int) -> bool:
        raise NotImplementedError


def tensors_at(trial, step: int, collection_names=None, tensor_regex=None) -> list[str]:
    """Names of the tensors saved at `step` in any of the collections or matching the regex (the union);
    every tensor at that step when neither is given."""
    if not collection_names and not tensor_regex:
        return trial.tensor_names(step=step)
    names: set[str] = set()
    for collection in collection_names or ():
        names.update(trial.tensor_names(step=step, collection=collection))
    if tensor_regex:
        names.update(trial.tensor_names(step=step, regex=tensor_regex))
    return sorted(names)
