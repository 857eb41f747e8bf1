"""`from shipyard.xgboost import XGBoost`, as `from sagemaker.xgboost import XGBoost`."""

from shipyard.sdk.frameworks import XGBoost

__all__ = ["XGBoost"]
