"""The search on Optuna, without jobs: proposals honour each range and its scaling, seeds reproduce,
Grid runs the product once, Bayesian finds better than Random in the same budget, Hyperband stops a
trial that is clearly behind, SageMaker's median stopping rule, and a search that survives its process."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from shipyard.spec.job import JobSpec
from shipyard.spec.tuning import TuningSpec
from shipyard.tuning.early_stopping import should_stop
from shipyard.tuning.search import Search

LOSS = {"Name": "loss", "Regex": "loss=([0-9.]+)"}


def _spec(ranges, static=None, **fields) -> TuningSpec:
    training = JobSpec(job_name="trial", output_path="file:///out", metric_definitions=(LOSS,),
                       hyperparameters={"sagemaker_program": '"train.py"', **(static or {})})
    return TuningSpec(tuning_job_name="tune", training=training, hyperparameter_ranges=ranges,
                      objective_metric_name="loss", objective_type="Minimize", **fields)


def _range(kind, name, low=None, high=None, scaling="Linear", values=None):
    if kind == "categorical":
        return {"kind": kind, "name": name, "values": values}
    return {"kind": kind, "name": name, "min_value": low, "max_value": high, "scaling_type": scaling}


def _draws(spec, n):
    search = Search(spec)
    out = []
    for _ in range(n):
        proposal = search.ask()
        search.tell(proposal.number, 0.0)
        out.append(proposal.hyperparameters)
    return out


def test_proposals_honour_ranges_and_scaling():
    spec = _spec([_range("continuous", "linear", 0.0, 1.0), _range("continuous", "log", 1e-4, 1.0, "Logarithmic"),
                  _range("continuous", "reverse", 0.0, 0.999, "ReverseLogarithmic"),
                  _range("integer", "width", 1, 1000, "Logarithmic"), _range("categorical", "opt", values=["sgd", "adam"])],
                 strategy="Random", random_seed=1, max_jobs=400)
    draws = _draws(spec, 400)
    assert all(0 <= d["linear"] <= 1 and 1e-4 <= d["log"] <= 1 and 0 <= d["reverse"] <= 0.999
               and 1 <= d["width"] <= 1000 and isinstance(d["width"], int) and d["opt"] in ("sgd", "adam") for d in draws)
    # Uniform: half below the midpoint. Log: half below the geometric mean (1e-2), not the midpoint.
    assert 0.4 < statistics.mean(d["linear"] < 0.5 for d in draws) < 0.6
    assert 0.4 < statistics.mean(d["log"] < 1e-2 for d in draws) < 0.6
    assert 0.4 < statistics.mean(d["width"] < math.sqrt(1000) for d in draws) < 0.6
    # ReverseLogarithmic: 1 - x is log-uniform in [0.001, 1], so half the values are above 1 - 0.0316.
    assert 0.4 < statistics.mean(d["reverse"] > 1 - math.sqrt(0.001) for d in draws) < 0.6


def test_a_seed_reproduces_random_and_hyperband():
    ranges = [_range("continuous", "lr", 1e-4, 0.1, "Logarithmic"), _range("integer", "width", 8, 64)]
    for strategy, static in (("Random", None), ("Hyperband", {"epochs": "9"})):
        first, again, other = (_draws(_spec(ranges, static, strategy=strategy, random_seed=seed, max_jobs=5), 5)
                               for seed in (7, 7, 8))
        assert first == again != other


def test_grid_runs_every_combination_once():
    spec = _spec([_range("categorical", "opt", values=["sgd", "adam"]),
                  _range("categorical", "batch", values=["16", "32", "64"])], strategy="Grid")
    draws = _draws(spec, spec.total_jobs())
    assert sorted((d["opt"], d["batch"]) for d in draws) == sorted(
        (o, b) for o in ("sgd", "adam") for b in ("16", "32", "64"))


def _objective(hps, rng):
    """A noisy bowl with its best at lr=1e-2, width=40."""
    return (math.log10(hps["lr"]) + 2) ** 2 + ((hps["width"] - 40) / 20) ** 2 + rng.gauss(0, 0.05)


def test_bayesian_beats_random_in_the_same_budget():
    ranges = [_range("continuous", "lr", 1e-5, 1.0, "Logarithmic"), _range("integer", "width", 1, 200)]
    best = {}
    for strategy in ("Bayesian", "Random"):
        bests = []
        for seed in range(5):
            search, rng = Search(_spec(ranges, strategy=strategy, random_seed=seed, max_jobs=30)), random.Random(seed)
            values = []
            for _ in range(30):
                proposal = search.ask()
                values.append(_objective(proposal.hyperparameters, rng))
                search.tell(proposal.number, values[-1])
            bests.append(min(values))
        best[strategy] = statistics.median(bests)
    assert best["Bayesian"] < best["Random"], best


def test_hyperband_stops_a_trial_clearly_behind_at_a_rung_and_none_before_min_resource():
    search = Search(_spec([_range("continuous", "lr", 1e-4, 0.1)], {"epochs": "27"}, strategy="Hyperband",
                          hyperband={"min_resource": 3}, random_seed=0, max_jobs=10))
    for loss in (1.0, 1.1, 0.9, 1.2):  # four trials reach the first rung (epoch 3) with these
        proposal = search.ask()
        search.report(proposal.number, 3, loss)
        search.tell(proposal.number, loss)
    behind, ahead = search.ask(), search.ask()
    assert [search.report(behind.number, epoch, 5.0) for epoch in (1, 2)] == [False, False]  # before min_resource
    assert search.report(behind.number, 3, 5.0) is True
    assert search.report(ahead.number, 3, 0.5) is False


@pytest.mark.parametrize("value, epoch, minimize, stop", [
    (2.0, 2, True, True),    # worse than the median of the running averages at epoch 2 (1.5)
    (1.4, 2, True, False),
    (1.4, 2, False, True),   # maximising, lower is worse
    (9.0, 5, True, False),   # no earlier trial reached epoch 5
])
def test_median_stopping_rule(value, epoch, minimize, stop):
    earlier = [[1.0, 1.0, 1.0], [2.0, 1.0], [3.0, 2.0, 1.0, 0.5]]  # running averages at epoch 2: 1.0, 1.5, 2.5
    assert should_stop(value, epoch, earlier, minimize) is stop


def test_a_search_in_sqlite_continues_in_a_new_process(tmp_path):
    spec = _spec([_range("integer", "width", 8, 64)], strategy="Random", random_seed=3, max_jobs=6)
    first = Search(spec, tmp_path / "search.db")
    for value in (3.0, 1.0, 2.0):
        proposal = first.ask()
        first.tell(proposal.number, value)
    again = Search(spec, tmp_path / "search.db")
    assert again.ask().number == 3
    assert again.study.best_value == 1.0
