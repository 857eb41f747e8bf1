"""SageMaker's built-in XGBoost algorithm (docs/xgboost-algorithm.md): hyperparameters (hyperparameters.py),
content types (data.py), metrics (metrics.py), training, alone or over XGBoost's collective (train.py)."""

from __future__ import annotations


def validate(hyperparameters):
    from shipyard.algorithms.xgboost.hyperparameters import validate

    return validate(hyperparameters)


def check_channels(channels):
    from shipyard.algorithms.xgboost.data import check_channels

    return check_channels(channels)


def metric_definitions() -> list[dict[str, str]]:
    from shipyard.algorithms.xgboost.metrics import definitions

    return definitions()


def main() -> int:
    from shipyard.algorithms.xgboost.train import main

    return main()
