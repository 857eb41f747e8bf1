"""`from smdebug.trials import create_trial`: smdebug's Trial and Tensor API over shipyard's trial
(shipyard.contract.debugger.trials), which reads the job's debug output while it runs. smdebug's `mode`
arguments default to modes.GLOBAL: its steps are global steps, as shipyard's are without a mode."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

from shipyard.contract.debugger import trials
from shipyard.contract.debugger.modes import GLOBAL, MODES, ModeKeys, parse
from shipyard.errors import ValidationError

from ..exceptions import NoMoreData, StepUnavailable, TensorUnavailable, TensorUnavailableForStep

WAIT_SECONDS = 1.0  # how often wait_for_steps looks for new steps


@contextmanager
def _missing(error: type[KeyError]):
    """shipyard's TensorUnavailable (a KeyError) as the smdebug exception of the lookup."""
    try:
        yield
    except KeyError as exc:
        raise error(*exc.args) from None


def _mode(mode) -> str | None:
    """smdebug's mode argument as shipyard's: None for GLOBAL (global steps)."""
    if mode is None:
        return None
    try:
        parsed = parse(mode)
    except ValueError as exc:
        raise ValidationError("mode", mode, str(exc)) from None
    return None if parsed == GLOBAL.value else parsed


class Tensor:
    def __init__(self, tensor) -> None:
        self._tensor, self.name = tensor, tensor.name

    def steps(self, mode=GLOBAL, show_incomplete_steps: bool = False) -> list[int]:
        return self._tensor.steps(_mode(mode))

    def value(self, step_num: int, mode=GLOBAL, worker: str | None = None):
        with _missing(TensorUnavailableForStep):
            return self._tensor.value(step_num, _mode(mode), worker)

    def values(self, mode=GLOBAL, worker: str | None = None) -> dict:
        """{step: numpy array} over the steps of `mode` (global steps by default)."""
        return {step: self.value(step, mode, worker) for step in self.steps(mode)}

    def reduction_value(self, step_num: int, reduction_name: str, mode=GLOBAL, worker: str | None = None,
                        abs: bool = False):  # noqa: A002 (smdebug's name)
        import numpy as np

        with _missing(TensorUnavailableForStep):
            return np.asarray(self._tensor.reduction_value(step_num, reduction_name, abs, _mode(mode), worker))

    def reduction_values(self, step_num: int, mode=GLOBAL, worker: str | None = None) -> dict:
        """{(reduction, abs): value} of the reductions saved at the step (smdebug's keys)."""
        import numpy as np

        with _missing(TensorUnavailableForStep):
            saved = self._tensor.reduction_values(step_num, _mode(mode), worker)
        return {(name.removeprefix("abs_"), name.startswith("abs_")): np.asarray(v) for name, v in saved.items()}

    def workers(self, step_num: int, mode=GLOBAL) -> list[str]:
        with _missing(StepUnavailable):
            return self._tensor.workers(step_num, _mode(mode))

    def prev_steps(self, step: int, n: int, mode=GLOBAL) -> list[int]:
        """The at most n steps of `mode` saved before `step`."""
        return [s for s in self.steps(mode) if s < step][-n:] if n > 0 else []


class Trial:
    def __init__(self, trial, name: str) -> None:
        self._trial, self.name, self.path = trial, name, trial.uri

    def steps(self, mode=GLOBAL, show_incomplete_steps: bool = False) -> list[int]:
        return self._trial.steps(_mode(mode))

    def tensor_names(self, *, step: int | None = None, mode=GLOBAL, regex=None, collection=None,
                     show_prefixed_tensors: bool = False) -> list[str]:
        if regex is not None and not isinstance(regex, str):
            regex = "|".join(f"(?:{r})" for r in regex)  # smdebug takes a list: any of them
        collection = getattr(collection, "name", collection)
        with _missing(StepUnavailable):
            return self._trial.tensor_names(step=step, collection=collection, regex=regex, mode=_mode(mode))

    def has_tensor(self, tname: str) -> bool:
        return tname in self._trial.tensor_names()

    def tensor(self, tname: str) -> Tensor:
        if not self.has_tensor(tname):
            raise TensorUnavailable(f"{tname} was not saved (tensors: {', '.join(self._trial.tensor_names())})")
        return Tensor(self._trial.tensor(tname))

    def modes(self) -> list[ModeKeys]:
        seen = {doc["mode"] for _s, _w, doc in self._trial.records()}
        return [ModeKeys(m) for m in MODES if m in seen]

    def mode(self, global_step: int) -> ModeKeys:
        with _missing(StepUnavailable):
            return ModeKeys(self._trial.mode_of(global_step)[0])

    def mode_step(self, global_step: int) -> int:
        with _missing(StepUnavailable):
            return self._trial.mode_of(global_step)[1]

    def global_step(self, mode, mode_step: int) -> int:
        mode = _mode(mode)
        with _missing(StepUnavailable):
            return mode_step if mode is None else self._trial.global_step(mode, mode_step)

    def workers(self) -> list[str]:
        return self._trial.workers()

    def wait_for_steps(self, required_steps, mode=GLOBAL) -> None:
        """Return once every step is saved; NoMoreData when the job has ended without one of them."""
        while True:
            missing = set(required_steps) - set(self.steps(mode))
            if not missing:
                return
            if self._trial.ended():
                missing = set(required_steps) - set(self.steps(mode))  # what came before the end
                if missing:
                    raise NoMoreData(f"the job has ended without steps {sorted(missing)}")
                return
            time.sleep(WAIT_SECONDS)


def create_trial(path: str, name: str | None = None, range_steps=None, check: bool = False,
                 index_mode: bool = True, cache: bool = False) -> Trial:
    """A trial over a debug output: a local path or an s3:// URI (est.latest_job_debugger_artifacts_path()).
    `check` and `cache` change nothing here (every step is read from the index, as it comes)."""
    if range_steps is not None:
        raise ValidationError("create_trial(range_steps)", range_steps, "not supported: read every step and "
                              "keep the ones wanted from trial.steps()")
    if not index_mode:
        raise ValidationError("create_trial(index_mode)", index_mode, "the tensors are read through their index "
                              "here; leave index_mode=True")
    return Trial(trials.Trial(str(path)), name or os.path.basename(str(path).rstrip("/")))


__all__ = ["Tensor", "Trial", "create_trial"]
