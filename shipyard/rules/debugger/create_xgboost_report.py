"""CreateXgboostReport (XGBoost): SageMaker's training report rule. It judges nothing (it never fires, and ends
NoIssuesFound); when the job ends it writes the HTML report of the saved tensors (xgboost_report.py), which the
watcher publishes where SageMaker leaves it: <output>/<job>/rule-output/<rule>/xgboost_report.html."""

from __future__ import annotations

from shipyard.rules.debugger.base import Rule

PARAMETERS: dict = {}
# SageMaker's: metrics, feature_importance, predictions and labels every 5 steps, hyperparameters at step 0.
COLLECTIONS = {**{name: {"save_interval": "5"} for name in ("metrics", "feature_importance", "predictions",
                                                             "labels")},
               "hyperparameters": {"save_steps": "0"}}
REPORT = "xgboost_report.html"


class CreateXgboostReport(Rule):
    def invoke_at_step(self, step: int) -> bool:
        return False

    def outputs(self, job: str) -> dict[str, str]:
        """The files this rule leaves in its output folder (the watcher publishes them when the job ends)."""
        from shipyard.rules.debugger.xgboost_report import render

        return {REPORT: render(self.base_trial, job)}


RULE = CreateXgboostReport
