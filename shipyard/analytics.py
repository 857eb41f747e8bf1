"""`from shipyard.analytics import TrainingJobAnalytics, HyperparameterTuningJobAnalytics`, as
`sagemaker.analytics`."""

from shipyard.lazy import exports

__all__ = ["HyperparameterTuningJobAnalytics", "TrainingJobAnalytics"]
__getattr__ = exports(__name__, {
    "TrainingJobAnalytics": "shipyard.sdk.analytics:TrainingJobAnalytics",
    "HyperparameterTuningJobAnalytics": "shipyard.sdk.tuner:HyperparameterTuningJobAnalytics",
})
