"""HyperparameterTuner's SageMaker surface, before any trial runs: the spec it builds, SageMaker's
errors through its names, and plan(): the first trials' hyperparameters as their scripts get them."""

from __future__ import annotations

import json

import pytest

from shipyard import Estimator
from shipyard.errors import ValidationError
from shipyard.pytorch import PyTorch
from shipyard.tuner import (CategoricalParameter, ContinuousParameter, HyperbandStrategyConfig,
                            HyperparameterTuner, IntegerParameter, StrategyConfig,
                            TuningJobCompletionCriteriaConfig, WarmStartConfig, WarmStartTypes)

METRICS = [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]
RANGES = {"lr": ContinuousParameter(1e-4, 0.1, "Logarithmic"), "width": IntegerParameter(8, 64),
          "optimizer": CategoricalParameter(["sgd", "adam"])}


def _pytorch(script, **arguments):
    return PyTorch(entry_point="train.py", source_dir=str(script), framework_version="2.13", py_version="py311",
                   hyperparameters={"epochs": 9}, **arguments)


def test_the_spec_carries_sagemaker_s_arguments(home, script):
    tuner = HyperparameterTuner(
        _pytorch(script), "loss", RANGES, metric_definitions=METRICS, objective_type="Minimize", max_jobs=12,
        max_parallel_jobs=3, strategy="Hyperband", random_seed=4,
        strategy_config=StrategyConfig(HyperbandStrategyConfig(min_resource=1, max_resource=9)),
        completion_criteria_config=TuningJobCompletionCriteriaConfig(target_objective_metric_value=0.1),
        warm_start_config=WarmStartConfig(WarmStartTypes.TRANSFER_LEARNING, {"parent-1"}))
    spec = tuner._spec(job_name="mnist-tune")
    assert spec.tuning_job_name == "mnist-tune" and spec.strategy == "Hyperband" and spec.max_resource() == 9
    assert [r.name for r in spec.only.hyperparameter_ranges] == ["lr", "width", "optimizer"]
    training = spec.only.training
    assert training.metric_definitions[0].name == "loss" and training.hyperparameters["epochs"] == "9"
    assert spec.completion_criteria.target_objective_metric_value == 0.1
    assert spec.warm_start.parents == ("parent-1",) and spec.total_jobs() == 12


def test_plan_gives_the_first_trials_as_scripts_get_them(home, script):
    tuner = HyperparameterTuner(_pytorch(script), "loss", RANGES, metric_definitions=METRICS, max_jobs=5,
                                strategy="Random", random_seed=1)
    trials = tuner.plan(trials=3)
    assert len(trials) == 3 and len({t["lr"] for t in trials}) == 3
    for trial in trials:
        assert 1e-4 <= json.loads(trial["lr"]) <= 0.1 and 8 <= json.loads(trial["width"]) <= 64
        assert trial["optimizer"] in ('"sgd"', '"adam"')  # JSON-encoded, as SageMaker's framework estimators
        assert trial["epochs"] == "9"
    assert tuner.plan(trials=3) == trials  # the seed reproduces them
    generic = HyperparameterTuner(Estimator(entry_point=str(script / "train.py")), "loss",
                                  {"optimizer": CategoricalParameter(["sgd"])}, metric_definitions=METRICS)
    # The generic estimator sends str() (max_jobs 1); SageMaker adds the objective's name.
    assert generic.plan() == [{"optimizer": "sgd", "_tuning_objective_metric": "loss"}]


@pytest.mark.parametrize("ranges, arguments, message", [
    ({"lr": ContinuousParameter(0.1, 1e-4)}, {}, r"hyperparameter_ranges\['lr'\]=\(0.1, 0.0001\): min_value is greater"),
    ({"lr": ContinuousParameter(0, 1, "Logarithmic")}, {}, r"Logarithmic range needs min_value > 0"),
    ({"epochs": IntegerParameter(1, 5)}, {}, r"hyperparameter_ranges=\['epochs'\]: .* either static .* or tuned"),
    ({"lr": ContinuousParameter(1e-4, 0.1)}, {"objective_metric_name": "accuracy"},
     r"^objective_metric_name='accuracy': unknown name; use one of loss"),
    ({"lr": ContinuousParameter(1e-4, 0.1)}, {"strategy": "Hyperband", "early_stopping_type": "Auto"},
     r"early_stopping_type='Auto': Hyperband stops trials itself"),
    ({"lr": ContinuousParameter(1e-4, 0.1)}, {"max_jobs": 2, "max_parallel_jobs": 3}, r"max_parallel_jobs=3"),
    ({"lr": ContinuousParameter(1e-4, 0.1)}, {"strategy": "Grid"}, r"Grid searches categorical ranges only"),
    ({"lr": 0.1}, {}, r"hyperparameter_ranges\['lr'\]=0.1: give a ContinuousParameter"),
])
def test_refused_before_any_trial(home, script, ranges, arguments, message):
    arguments = {"objective_metric_name": "loss", "metric_definitions": METRICS, **arguments}
    with pytest.raises(ValidationError, match=message):
        HyperparameterTuner(_pytorch(script), hyperparameter_ranges=ranges, **arguments).plan()


def test_create_names_what_does_not_match_its_estimators(home, script):
    estimators = {"a": _pytorch(script), "b": _pytorch(script)}
    ranges = {"a": {"lr": ContinuousParameter(1e-4, 0.1)}, "b": {"width": IntegerParameter(8, 64)}}
    with pytest.raises(ValidationError, match=r"objective_metric_name_dict=\['b'\]: keys must be estimator_dict's: "
                                              r"a, b; add these"):
        HyperparameterTuner.create(estimators, {"a": "loss"}, ranges)
    tuner = HyperparameterTuner.create(estimators, {"a": "loss", "b": "loss"}, ranges,
                                       metric_definitions_dict={"a": METRICS, "b": METRICS}, max_jobs=4)
    with pytest.raises(ValidationError, match=r"inputs=.*give a dict of estimator name to that estimator's inputs"):
        tuner.plan(inputs="file:///data")
    with pytest.raises(ValidationError, match=r"strategy='Hyperband': tuning several estimators at once works with"):
        HyperparameterTuner.create(estimators, {"a": "loss", "b": "loss"}, ranges, strategy="Hyperband",
                                   metric_definitions_dict={"a": METRICS, "b": METRICS}).plan()
