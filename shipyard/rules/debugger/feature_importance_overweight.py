"""FeatureImportanceOverweight (XGBoost): at each step, the `nfeatures` largest feature importances of the
type `tensor_regex` picks (weight by default), normalised over all features; fires if together they hold
more than `threshold` of the total (the model leans on a few features)."""

from __future__ import annotations

from shipyard.rules.debugger.base import Rule, tensors_at
from shipyard.spec.rule_parameters import Parameter

PARAMETERS = {
    "threshold": Parameter("float", 0.8, "the share of the total importance the top features may hold"),
    "nfeatures": Parameter("int", 3, "how many of the most important features are summed"),
    "tensor_regex": Parameter("str", ".*feature_importance/weight", "the importances to read"),
}
COLLECTIONS = {"feature_importance": {"save_interval": "5"}}


class FeatureImportanceOverweight(Rule):
    def invoke_at_step(self, step: int) -> bool:
        p = self.parameters
        names = tensors_at(self.base_trial, step, None, p["tensor_regex"])
        importance = {name.rsplit("/", 1)[-1]: float(self.base_trial.tensor(name).value(step).sum())
                      for name in names}
        total = sum(importance.values())
        if total <= 0:
            return False
        top = sorted(importance, key=importance.get, reverse=True)[:p["nfeatures"]]
        share = sum(importance[f] for f in top) / total
        if share > p["threshold"]:
            self.finding = (f"the {len(top)} most important features ({', '.join(top)}) hold {share:.0%} of the "
                            f"importance of {len(importance)} features (threshold {p['threshold']:.0%})")
            return True
        return False


RULE = FeatureImportanceOverweight
