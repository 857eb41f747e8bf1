"""LossNotDecreasing: every `num_steps`, the loss at step s against the newest saved loss at or before
s - num_steps; fires if it fell by less than `diff_percent` % or rose by more than
`increase_threshold_percent` %. Steps are counted in `mode`: "global" compares across all steps by
global step, "train"/"eval"/"predict" only that mode's steps by mode step; unset, each mode's losses are
compared within their own mode (SageMaker tries EVAL, then TRAIN, then GLOBAL: a training loss is
never compared with a validation loss)."""

from __future__ import annotations

from shipyard.contract.debugger import modes
from shipyard.rules.debugger.base import Rule, step_in_mode, tensors_at
from shipyard.spec.rule_parameters import Parameter

PARAMETERS = {
    "collection_names": Parameter("list", None),
    "tensor_regex": Parameter("str", None),
    "use_losses_collection": Parameter("bool", True),
    "num_steps": Parameter("int", 10),
    "diff_percent": Parameter("float", 0.1),
    "increase_threshold_percent": Parameter("float", 5.0),
    "mode": Parameter("str", None, "train, eval, predict or global"),
}
COLLECTIONS = {"losses": {"save_interval": "500"}}


class LossNotDecreasing(Rule):
    def __init__(self, base_trial, **parameters) -> None:
        super().__init__(base_trial, **parameters)
        self.mode = modes.parse(parameters["mode"]) if parameters.get("mode") else None
        # (loss tensor, mode) -> (step counted in that mode, value) seen so far, and the next step to check
        self.history: dict[tuple[str, str], list[tuple[int, float]]] = {}
        self.next_check: dict[tuple[str, str], int] = {}

    def _loss_names(self, step: int) -> list[str]:
        p = self.parameters
        collections = list(p["collection_names"] or ())
        if p["use_losses_collection"]:
            collections.append("losses")
        return tensors_at(self.base_trial, step, collections, p["tensor_regex"])

    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        mode = self.mode or self.base_trial.mode_of(step)[0]
        counted = step_in_mode(self.base_trial, step, mode)
        if counted is None:
            return False
        for name in self._loss_names(step):
            loss = float(self.base_trial.tensor(name).value(step).mean())
            seen = self.history.setdefault((name, mode), [])
            seen.append((counted, loss))
            due = self.next_check.setdefault((name, mode), seen[0][0] + p["num_steps"])
            if counted < due:
                continue
            self.next_check[(name, mode)] = counted + p["num_steps"]
            earlier = [v for s, v in seen if s <= counted - p["num_steps"]]
            if not earlier:
                continue
            before = earlier[-1]
            change = (before - loss) / max(abs(before), 1e-12) * 100  # positive: it fell
            if change < p["diff_percent"] or -change > p["increase_threshold_percent"]:
                where = f"step {step}" if mode == "global" else f"step {step} ({mode} step {counted})"
                self.finding = (f"tensor {name}: loss {loss:.6g} at {where} against {before:.6g} "
                                f"{p['num_steps']} {'' if mode == 'global' else mode + ' '}steps earlier "
                                f"({change:+.3g}% decrease)")
                return True
        return False


RULE = LossNotDecreasing
