"""The built-in XGBoost algorithm's metrics as SageMaker names and scrapes them: after every round the
leader prints `[3]#011train-rmse:0.41234 #011validation-rmse:0.45678`, and the metric `validation:rmse` is
the first group of `.*\\[[0-9]+\\].*#011validation-rmse:(\\S+)` (sagemaker-xgboost-container,
algorithm_mode/metrics.py; `#011` is how CloudWatch shows the tab XGBoost prints, and SageMaker's regexes
match it, so the line is printed that way here for the same regexes to work on it). Every job of the
algorithm is scraped for these definitions (JobSpec.all_metric_definitions), so a HyperparameterTuner with
objective `validation:auc` needs no metric_definitions, as on SageMaker."""

from __future__ import annotations

import sys
from typing import Any

from shipyard.errors import ValidationError

# The container's XGB_MAXIMIZE_METRICS and XGB_MINIMIZE_METRICS (constants/xgb_constants.py).
MAXIMIZE = ("accuracy", "auc", "aucpr", "balanced_accuracy", "f1", "f1_binary", "f1_macro", "map", "ndcg",
            "precision", "r2", "recall", "precision_macro", "precision_micro", "recall_macro", "recall_micro")
MINIMIZE = ("aft-nloglik", "cox-nloglik", "error", "gamma-deviance", "gamma-nloglik",
            "interval-regression-accuracy", "logloss", "mae", "mape", "merror", "mlogloss", "mphe", "mse",
            "poisson-nloglik", "rmse", "rmsle", "tweedie-nloglik")
# Metrics XGBoost computes itself; the others the container computes from predictions (not built here).
XGBOOST_METRICS = frozenset({"auc", "aucpr", "map", "ndcg", "aft-nloglik", "cox-nloglik", "error",
                             "gamma-deviance", "gamma-nloglik", "interval-regression-accuracy", "logloss", "mae",
                             "mape", "merror", "mlogloss", "mphe", "poisson-nloglik", "rmse", "rmsle",
                             "tweedie-nloglik"})
_OWN_ONLY = ("SageMaker's container computes this one from predictions; shipyard's built-in XGBoost computes "
             f"XGBoost's own only: {', '.join(sorted(XGBOOST_METRICS))}")
CHANNELS = ("train", "validation")
TUNING_OBJECTIVE = "_tuning_objective_metric"   # what a tuning job adds to each trial's hyperparameters
TAB = "#011"


def metric_names() -> list[str]:
    return [f"{channel}:{metric}" for channel in CHANNELS for metric in (*MAXIMIZE, *MINIMIZE)]


def definitions() -> list[dict[str, str]]:
    """Every metric the algorithm prints, as MetricDefinitions."""
    return [{"Name": f"{channel}:{metric}", "Regex": f".*\\[[0-9]+\\].*{TAB}{channel}-{metric}:(\\S+)"}
            for channel in CHANNELS for metric in (*MAXIMIZE, *MINIMIZE)]


def eval_metrics(params: dict[str, Any]) -> list[str]:
    """eval_metric, with the tuning objective's metric added (the container adds it, so a tuning job gets its
    objective whatever eval_metric says); empty: XGBoost's default for the objective."""
    metrics = list(params.get("eval_metric", []))
    objective = params.get(TUNING_OBJECTIVE)
    if objective:
        metric = objective.partition(":")[2]
        if metric not in XGBOOST_METRICS:
            raise ValidationError(f"hyperparameters[{TUNING_OBJECTIVE!r}]", objective, _OWN_ONLY)
        if metric not in metrics:
            metrics.append(metric)
    for metric in metrics:
        if metric.partition("@")[0] not in XGBOOST_METRICS:
            raise ValidationError("hyperparameters['eval_metric']", metric, _OWN_ONLY)
    return metrics


def line(iteration: int, results: dict[str, dict[str, float]]) -> str:
    """One round's line: `[i]#011<channel>-<metric>:<value> ...`, channels and metrics in XGBoost's order.
    A space ends each value but the last: SageMaker's `(\\S+)` would otherwise capture the rest of the line
    with it, which is not a number (shipyard's scraper parses the whole group)."""
    parts = [f"{TAB}{channel}-{metric}:{value:.5f}" for channel, scores in results.items()
             for metric, value in scores.items()]
    return f"[{iteration}]" + " ".join(parts)


def printer(start: int = 0):
    """An XGBoost callback printing each round's line on the leader (every rank computes the same values:
    the metrics are reduced over the workers), numbered from `start`, the rounds a checkpoint held."""
    import xgboost

    class PrintMetrics(xgboost.callback.TrainingCallback):
        def after_iteration(self, model, epoch: int, evals_log) -> bool:
            if xgboost.collective.get_rank() == 0:
                latest = {channel: {metric: float(values[-1][0] if isinstance(values[-1], tuple) else values[-1])
                                    for metric, values in scores.items()} for channel, scores in evals_log.items()}
                print(line(start + epoch, latest), file=sys.stdout, flush=True)
            return False

    return PrintMetrics()
