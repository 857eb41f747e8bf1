"""Bad TensorFlow distributions are refused when the estimator is built, naming the field and the fix."""

from __future__ import annotations

import pytest

from shipyard.errors import ValidationError
from shipyard.pytorch import PyTorch
from shipyard.sdk.estimator import Estimator
from shipyard.tensorflow import TensorFlow

PS = {"parameter_server": {"enabled": True}}
MWMS = {"multi_worker_mirrored_strategy": {"enabled": True}}


@pytest.mark.parametrize(("estimator", "kwargs", "field", "message"), [
    (TensorFlow, {"instance_count": 1, "distribution": PS}, "instance_count", "instance_count >= 2"),
    (PyTorch, {"instance_count": 2, "distribution": PS}, "distribution.parameter_server",
     "TensorFlow strategy; use shipyard.tensorflow.TensorFlow"),
    (PyTorch, {"instance_count": 2, "distribution": MWMS}, "distribution.multi_worker_mirrored_strategy",
     "TensorFlow strategy"),
    (Estimator, {"instance_count": 2, "distribution": MWMS}, "distribution.multi_worker_mirrored_strategy",
     "TensorFlow strategy"),
    (TensorFlow, {"instance_count": 2, "distribution": {**PS, **MWMS}}, "distribution",
     "a job runs one strategy; enable only one of multi_worker_mirrored_strategy and parameter_server"),
    (TensorFlow, {"instance_count": 2, "distribution": {**MWMS, "mpi": {"enabled": True}}}, "distribution",
     "a job runs one strategy; enable only one of mpi and multi_worker_mirrored_strategy"),
    (TensorFlow, {"instance_count": 2, "distribution": {"parameter_server": {"enabled": True, "workers": 2}}},
     "distribution.parameter_server", "unknown name; use one of enabled"),
])
def test_bad_tensorflow_distribution(estimator, kwargs, field, message):
    with pytest.raises(ValidationError, match=message) as info:
        estimator(entry_point="train.py", **kwargs)
    assert info.value.field == field


@pytest.mark.parametrize("distribution", [PS, MWMS, "parameter_server", "multi_worker_mirrored_strategy"])
def test_tensorflow_strategies_are_accepted(distribution):
    estimator = TensorFlow(entry_point="train.py", instance_count=2, distribution=distribution)
    assert len(estimator._enabled_distribution) == 1
