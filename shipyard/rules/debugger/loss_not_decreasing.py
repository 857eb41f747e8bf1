"""LossNotDecreasing: every `num_steps`, the loss at step s against the newest saved loss at or before
s - num_steps; fires if it fell by less than `diff_percent` % or rose by more than
`increase_threshold_percent` %."""

from __future__ import annotations

from shipyard.rules.debugger.base import Rule, tensors_at
from shipyard.rules.parameters import Parameter

PARAMETERS = {
    "collection_names": Parameter("list", None),
    "tensor_regex": Parameter("str", None),
    "use_losses_collection": Parameter("bool", True),
    "num_steps": Parameter("int", 10),
    "diff_percent": Parameter("float", 0.1),
    "increase_threshold_percent": Parameter("float", 5.0),
    "mode": Parameter("str", None),
}
COLLECTIONS = {"losses": {"save_interval": "500"}}


class LossNotDecreasing(Rule):
    def __init__(self, base_trial, **parameters) -> None:
        super().__init__(base_trial, **parameters)
        self.history: dict[str, list[tuple[int, float]]] = {}  # loss tensor -> (step, value) seen so far
        self.next_check: dict[str, int] = {}

    def _loss_names(self, step: int) -> list[str]:
        p = self.parameters
        collections = list(p["collection_names"] or ())
        if p["use_losses_collection"]:
            collections.append("losses")
        return tensors_at(self.base_trial, step, collections, p["tensor_regex"])

    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        for name in self._loss_names(step):
            loss = float(self.base_trial.tensor(name).value(step).mean())
            seen = self.history.setdefault(name, [])
            seen.append((step, loss))
            due = self.next_check.setdefault(name, seen[0][0] + p["num_steps"])
            if step < due:
                continue
            self.next_check[name] = step + p["num_steps"]
            earlier = [v for s, v in seen if s <= step - p["num_steps"]]
            if not earlier:
                continue
            before = earlier[-1]
            change = (before - loss) / max(abs(before), 1e-12) * 100  # positive: it fell
            if change < p["diff_percent"] or -change > p["increase_threshold_percent"]:
                self.finding = (f"tensor {name}: loss {loss:.6g} at step {step} against {before:.6g} "
                                f"{p['num_steps']} steps earlier ({change:+.3g}% decrease)")
                return True
        return False


RULE = LossNotDecreasing
