"""`from shipyard.tuner import HyperparameterTuner, ContinuousParameter, ...`, as `from sagemaker.tuner
import ...` (sagemaker.parameter's ranges included)."""

from shipyard.lazy import exports

__all__ = ["CategoricalParameter", "ContinuousParameter", "HyperbandStrategyConfig", "HyperparameterTuner",
           "IntegerParameter", "StrategyConfig", "TuningJobCompletionCriteriaConfig", "WarmStartConfig",
           "WarmStartTypes"]
__getattr__ = exports(__name__, {name: f"shipyard.sdk.tuner:{name}" for name in __all__})
