"""A tuning job's spec refuses, before any trial starts, what SageMaker refuses (spec section C), naming
the field, the value and the fix."""

from __future__ import annotations

import pytest

from shipyard.errors import ValidationError
from shipyard.spec.job import JobSpec
from shipyard.spec.tuning import TuningSpec

LOSS = {"Name": "loss", "Regex": "loss=([0-9.]+)"}


def _spec(ranges, static=None, metrics=(LOSS,), **fields) -> TuningSpec:
    training = JobSpec(job_name="trial", output_path="file:///out", metric_definitions=metrics,
                       hyperparameters={"sagemaker_program": '"train.py"', **(static or {})})
    return TuningSpec(tuning_job_name="tune", training=training, hyperparameter_ranges=ranges,
                      objective_metric_name="loss", objective_type="Minimize", **fields)


LR = {"kind": "continuous", "name": "lr", "min_value": 1e-4, "max_value": 0.1, "scaling_type": "Logarithmic"}
WIDTH = {"kind": "integer", "name": "width", "min_value": 8, "max_value": 64}
OPTIMIZER = {"kind": "categorical", "name": "optimizer", "values": ["sgd", "adam"]}
BATCH = {"kind": "categorical", "name": "batch", "values": ["16", "32", "64"]}


def test_a_valid_spec_and_what_it_derives():
    spec = _spec([LR, WIDTH, OPTIMIZER], max_jobs=10, max_parallel_jobs=2)
    assert spec.total_jobs() == 10 and spec.strategy == "Bayesian"
    grid = _spec([OPTIMIZER, BATCH], strategy="Grid")
    assert grid.grid_size() == grid.total_jobs() == 6
    assert _spec([LR], strategy="Random").total_jobs() == 1  # SageMaker's default
    hyperband = _spec([LR], static={"epochs": "27"}, strategy="Hyperband")
    assert (hyperband.min_resource(), hyperband.max_resource()) == (1, 27)
    given = _spec([LR], strategy="Hyperband", hyperband={"min_resource": 3, "max_resource": 81})
    assert (given.min_resource(), given.max_resource()) == (3, 81)


@pytest.mark.parametrize("ranges, static, fields, message", [
    ([{**LR, "min_value": 1.0, "max_value": 0.1}], None, {}, r"hyperparameter_ranges\['lr'\]=\(1.0, 0.1\): min_value is greater"),
    ([{**LR, "min_value": 0.0}], None, {}, r"a Logarithmic range needs min_value > 0"),
    ([{**LR, "scaling_type": "ReverseLogarithmic", "max_value": 1.0}], None, {}, r"ReverseLogarithmic needs 0 <= min_value <= max_value < 1"),
    ([{**WIDTH, "scaling_type": "ReverseLogarithmic"}], None, {}, r"ReverseLogarithmic is for continuous ranges only"),
    ([{**LR, "scaling_type": "Logarithmc"}], None, {}, r"scaling_type='Logarithmc': unknown name; did you mean 'Logarithmic'\?"),
    ([LR], {"lr": "0.1"}, {}, r"hyperparameter_ranges=\['lr'\]: a hyperparameter is either static .* or tuned"),
    ([LR, LR], None, {}, r"hyperparameter_ranges=\['lr'\]: each hyperparameter may have one range"),
    ([{**WIDTH, "name": f"p{i}"} for i in range(31)], None, {}, r"at most 30 hyperparameters can be tuned"),
    ([LR, OPTIMIZER], None, {"strategy": "Grid"}, r"hyperparameter_ranges=\['lr'\]: Grid searches categorical ranges only"),
    ([OPTIMIZER, BATCH], None, {"strategy": "Grid", "max_jobs": 5}, r"max_jobs=5: Grid runs every combination: 6"),
    ([LR], {"epochs": "9"}, {"strategy": "Hyperband", "early_stopping_type": "Auto"}, r"early_stopping_type='Auto': Hyperband stops trials itself"),
    ([LR], None, {"strategy": "Hyperband"}, r"Hyperband needs max_resource: .* named epochs or numepochs"),
    ([LR], {"epochs": "lots"}, {"strategy": "Hyperband"}, r"hyperparameters\['epochs'\]='lots': Hyperband takes max_resource"),
    ([LR], None, {"strategy": "Random", "hyperband": {"max_resource": 9}}, r"strategy_config=.*is for the Hyperband strategy"),
    ([LR], None, {"max_jobs": 4, "max_parallel_jobs": 5}, r"max_parallel_jobs=5: is more than max_jobs \(4\)"),
    ([LR], None, {"strategy": "Bayesain"}, r"strategy='Bayesain': unknown name; did you mean 'Bayesian'\?"),
    ([{**OPTIMIZER, "values": [str(i) for i in range(31)]}], None, {}, r"values"),
    ([LR], None, {"completion_criteria": {"max_number_of_training_jobs_not_improving": 2}}, r"max_number_of_training_jobs_not_improving"),
    ([LR], None, {"warm_start": {"type": "TransferLearning", "parents": ["a", "b", "c", "d", "e", "f"]}}, r"warm_start.parents"),
])
def test_refused(ranges, static, fields, message):
    with pytest.raises(ValidationError, match=message):
        _spec(ranges, static, **fields)


def test_the_objective_must_be_a_defined_metric():
    with pytest.raises(ValidationError, match=r"objective_metric_name='loss': unknown name; did you mean 'losses'\?"):
        _spec([LR], metrics=({"Name": "losses", "Regex": "l=(.+)"},))
    with pytest.raises(ValidationError, match=r"objective_metric_name='loss': no metric definition names it"):
        _spec([LR], metrics=())


def test_the_hundred_hyperparameters_count_static_tuned_and_the_objective():
    static = {f"s{i}": "1" for i in range(70)}
    _spec([{**WIDTH, "name": f"p{i}"} for i in range(29)], static)
    with pytest.raises(ValidationError, match="static plus tuned hyperparameters .* at most 100"):
        _spec([{**WIDTH, "name": f"p{i}"} for i in range(30)], static)
