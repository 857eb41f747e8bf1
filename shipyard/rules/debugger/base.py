"""What every debugger rule is: SageMaker's smdebug Rule shape. A rule gets the trial and its typed
parameters; `invoke_at_step(step)` returns True when its condition is met at that (GLOBAL) step and leaves
in `self.finding` the tensor (and figure) that triggered it. Custom rules subclass this (or just follow the
same shape: a class taking `base_trial` and keyword parameters, with invoke_at_step).

The helpers below are what several rules share: choosing tensors (collections and/or a regex), losses,
the step as counted in a mode, and the per-unit inactivity of activations (DeadRelu, SaturatedActivation)."""

from __future__ import annotations


class Rule:
    # Actions taken when the condition is met, on top of the rule configuration's own (the watcher adds
    # them): StalledTrainingRule's stop_training_on_fire.
    actions: tuple = ()

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


def tensors_by_regex(trial, step: int, regex: str, default_regex: str, default_collections) -> list[str]:
    """The tensors a rule's regex parameter picks. SageMaker's default regexes name MXNet tensors
    (`.*hybridsequential0_input_0`) or one spelling of a module name (`.*relu_output`); left at its
    default, the rule also takes the tensors of its default collections, whose regexes fit PyTorch names
    (collections.BUILTIN_REGEX). A regex the user gives is taken as it is."""
    if regex == default_regex:
        return tensors_at(trial, step, default_collections, regex)
    return tensors_at(trial, step, None, regex)


def require_tensor_choice(rule: str, parameters: dict) -> None:
    """AllZero (and rules like it) need collection_names or tensor_regex: checked when the rule is made."""
    if not parameters.get("collection_names") and not parameters.get("tensor_regex"):
        raise ValueError(f"rule {rule} needs collection_names or tensor_regex (or both): give the "
                         "collections or a regex of the tensors to check")


def losses_at(trial, step: int, tensor_regex: str | None = None) -> list[str]:
    """The loss tensors at a step: those matching tensor_regex, else the `losses` collection."""
    return tensors_at(trial, step, None if tensor_regex else ["losses"], tensor_regex)


def mean_loss(trial, step: int, tensor_regex: str | None = None) -> tuple[str, float] | None:
    """(names, mean value) of the step's loss tensors, or None when the step saved none."""
    names = losses_at(trial, step, tensor_regex)
    if not names:
        return None
    values = [float(trial.tensor(n).value(step).mean()) for n in names]
    return ", ".join(names), sum(values) / len(values)


def step_in_mode(trial, step: int, mode: str) -> int | None:
    """The GLOBAL step as counted in `mode` (its mode step; "global": the step itself), or None when the
    step belongs to another mode."""
    if mode == "global":
        return step
    step_mode, mode_step = trial.mode_of(step)
    return mode_step if step_mode == mode else None


def inactive_units_percent(active, threshold_inactivity: float) -> float:
    """active: a boolean array, samples on the first axis and units on the others (a unit is active on a
    sample where True). The % of units active on fewer than `threshold_inactivity` % of the samples."""
    per_unit = active.reshape(active.shape[0], -1).mean(axis=0) * 100
    return float((per_unit < threshold_inactivity).mean() * 100)


def as_classes(value, argmax: bool = False):
    """Class numbers, one per sample (ClassImbalance, Confusion): with `argmax`, the argmax over the last
    axis of probability or one-hot vectors (a tensor of one axis is taken as class numbers already), else
    the values rounded."""
    import numpy as np

    value = np.asarray(value)
    if argmax and value.ndim > 1:
        return value.argmax(axis=-1).ravel().astype(np.int64)
    return np.rint(value).ravel().astype(np.int64)
