"""The built-in XGBoost algorithm's hyperparameters: SageMaker's names, types and ranges, given as the plain
strings SageMaker gives an algorithm; every bad one is an error naming it before anything runs (the SDK runs the
same check at Estimator(...))."""

from __future__ import annotations

import pytest

from shipyard import Estimator, image_uris
from shipyard.algorithms.xgboost.hyperparameters import booster_params, validate
from shipyard.errors import ValidationError

IMAGE = image_uris.retrieve("xgboost", "us-east-1", "1.7-1")


def test_strings_become_typed_parameters():
    params = validate({"num_round": "50", "eta": "0.2", "max_depth": "6", "objective": "binary:logistic",
                       "eval_metric": "auc,error@0.3", "subsample": "1", "seed": "-3", "csv_weights": "1",
                       "sagemaker_job_name": '"x"'})   # sagemaker_* keys are the platform's, not the algorithm's
    assert params == {"num_round": 50, "eta": 0.2, "max_depth": 6, "objective": "binary:logistic",
                      "eval_metric": ["auc", "error@0.3"], "subsample": 1.0, "seed": -3, "csv_weights": 1}
    booster, notes = booster_params(params)
    assert "num_round" not in booster and "csv_weights" not in booster and booster["eta"] == 0.2
    assert notes == []


@pytest.mark.parametrize(("given", "field", "says"), [
    ({}, "hyperparameters", "num_round is required"),
    ({"num_round": "0"}, "hyperparameters['num_round']", "out of range: must be in [1, inf)"),
    ({"num_round": "2.5"}, "hyperparameters['num_round']", "must be an integer"),
    ({"num_round": "ten"}, "hyperparameters['num_round']", "must be an integer"),
    ({"num_round": "5", "eta": "1.5"}, "hyperparameters['eta']", "must be in [0, 1]"),
    ({"num_round": "5", "subsample": "0"}, "hyperparameters['subsample']", "must be in (0, 1]"),
    ({"num_round": "5", "max_depht": "3"}, "hyperparameters", "did you mean 'max_depth'?"),
    ({"num_round": "5", "booster": "gbforest"}, "hyperparameters['booster']", "one of gbtree, gblinear, dart"),
    ({"num_round": "5", "objective": "multi:softmax"}, "hyperparameters['num_class']", "needs num_class"),
    ({"num_round": "5", "num_class": "3"}, "hyperparameters['num_class']", "only for objective multi"),
    ({"num_round": "5", "eval_metric": "auc"}, "hyperparameters['eval_metric']", "binary classification"),
    ({"num_round": "5", "eval_metric": "rmse,rmsee"}, "hyperparameters['eval_metric']", "did you mean 'rmse'?"),
    ({"num_round": "5", "eval_metric": "rmse@0.5"}, "hyperparameters['eval_metric']", "error, ndcg and map only"),
    ({"num_round": "5", "eval_metric": "f1"}, "hyperparameters['eval_metric']", "from predictions"),
    ({"num_round": "5", "_tuning_objective_metric": "validation:acc"}, "hyperparameters['_tuning_objective_metric']",
     "did you mean 'validation:auc'?"),
    ({"num_round": "5", "updater": "grow_colmaker"}, "hyperparameters['updater']", "not supported by shipyard"),
])
def test_bad_hyperparameters_name_the_field_and_the_fix(given, field, says):
    with pytest.raises(ValidationError) as error:
        validate(given)
    assert error.value.field == field and says in str(error.value)


def test_values_xgboost_3_renamed_are_translated_and_said():
    booster, notes = booster_params(validate({"num_round": "1", "objective": "reg:linear", "tree_method": "gpu_hist",
                                              "predictor": "cpu_predictor"}))
    assert booster == {"objective": "reg:squarederror", "tree_method": "hist", "device": "cuda"}
    assert len(notes) == 3 and "predictor" in notes[2]


def test_the_estimator_checks_them_before_anything_runs(home):
    with pytest.raises(ValidationError, match=r"hyperparameters\['max_depth'\]='-1': out of range"):
        Estimator(image_uri=IMAGE, role="r", instance_count=1, instance_type="local",
                  hyperparameters={"num_round": 5, "max_depth": -1})
    assert not (home / "jobs").exists()
    estimator = Estimator(image_uri=IMAGE, role="r", instance_count=1, instance_type="local",
                          hyperparameters={"num_round": 5, "eta": 0.1})
    # As SageMaker's generic Estimator sends them: str() of each value, no sagemaker_* keys added.
    assert estimator.hyperparameters() == {"num_round": "5", "eta": "0.1"}
    estimator.set_hyperparameters(num_round=0)
    with pytest.raises(ValidationError, match=r"hyperparameters\['num_round'\]='0'"):
        estimator.plan({"train": "file:///tmp"})


@pytest.mark.parametrize(("arguments", "field"), [
    ({"distribution": {"torch_distributed": {"enabled": True}}}, "distribution"),
    ({"source_dir": "."}, "source_dir"),
])
def test_what_a_built_in_algorithm_cannot_take_is_an_error(home, arguments, field):
    with pytest.raises(ValidationError) as error:
        Estimator(image_uri=IMAGE, role="r", instance_count=2, instance_type="local",
                  hyperparameters={"num_round": 5}, **arguments)
    assert error.value.field == field
