"""The built-in XGBoost algorithm's metrics: the lines it prints, SageMaker's regexes finding each value in them
under SageMaker's names, and those definitions coming with the image, so a tuner's objective `validation:auc`
and a job's describe() need no metric_definitions."""

from __future__ import annotations

import re

import pytest

from shipyard import Estimator, image_uris
from shipyard.algorithms.xgboost.metrics import definitions, eval_metrics, line
from shipyard.errors import ValidationError
from shipyard.tuner import HyperparameterTuner, IntegerParameter

IMAGE = image_uris.retrieve("xgboost", "eu-west-1", "1.7-1")


def test_every_value_of_a_line_is_found_under_sagemakers_name():
    printed = line(7, {"train": {"rmse": 0.25, "mae": 0.125}, "validation": {"rmse": 0.5, "mae": 1.5}})
    assert printed == "[7]#011train-rmse:0.25000 #011train-mae:0.12500 #011validation-rmse:0.50000 " \
                      "#011validation-mae:1.50000"
    found = {}
    for definition in definitions():
        match = re.search(definition["Regex"], printed)
        if match:
            found[definition["Name"]] = float(match.group(1))
    assert found == {"train:rmse": 0.25, "train:mae": 0.125, "validation:rmse": 0.5, "validation:mae": 1.5}


def test_the_definitions_are_sagemakers():
    named = {d["Name"]: d["Regex"] for d in definitions()}
    assert named["validation:auc"] == ".*\\[[0-9]+\\].*#011validation-auc:(\\S+)"
    assert named["train:logloss"] == ".*\\[[0-9]+\\].*#011train-logloss:(\\S+)"
    assert len(named) == 66   # 33 metrics (the container's maximize and minimize lists) x train, validation


def test_the_tuning_objective_is_evaluated_whatever_eval_metric_says():
    assert eval_metrics({"eval_metric": ["rmse"], "_tuning_objective_metric": "validation:mae"}) == ["rmse", "mae"]
    assert eval_metrics({"_tuning_objective_metric": "train:auc"}) == ["auc"]
    assert eval_metrics({}) == []   # XGBoost's default for the objective
    with pytest.raises(ValidationError, match="computes XGBoost's own"):
        eval_metrics({"_tuning_objective_metric": "validation:f1"})


def test_a_job_of_the_image_is_scraped_for_them_and_shows_them(home):
    estimator = Estimator(image_uri=IMAGE, role="r", instance_count=1, instance_type="local",
                          hyperparameters={"num_round": 5}, metric_definitions=[{"Name": "validation:rmse",
                                                                                  "Regex": "rmse=(\\S+)"}])
    spec = estimator._spec({"train": "file:///tmp"}, None, estimator._store())
    assert spec.image_uri == IMAGE and spec.algorithm == "xgboost"
    scraped = {m.name: m.regex for m in spec.all_metric_definitions}
    assert len(scraped) == 66 and scraped["validation:rmse"] == "rmse=(\\S+)"   # the job's own wins
    assert [m.name for m in spec.metric_definitions] == ["validation:rmse"]   # never-matched warnings: its own only


def test_a_tuner_objective_of_the_algorithm_needs_no_metric_definitions(home):
    estimator = Estimator(image_uri=IMAGE, role="r", instance_count=1, instance_type="local",
                          hyperparameters={"num_round": 5, "objective": "binary:logistic"})
    tuner = HyperparameterTuner(estimator, "validation:auc", {"max_depth": IntegerParameter(2, 6)}, max_jobs=2,
                                strategy="Random", random_seed=4)
    (planned, _) = tuner.plan({"train": "file:///tmp"}, trials=2)
    assert planned["_tuning_objective_metric"] == "validation:auc" and planned["num_round"] == "5"
    assert planned["max_depth"] in {str(depth) for depth in range(2, 7)}
    with pytest.raises(ValidationError, match="did you mean 'validation:auc'"):
        HyperparameterTuner(estimator, "validation:acu", {"max_depth": IntegerParameter(2, 6)}).plan(
            {"train": "file:///tmp"})
