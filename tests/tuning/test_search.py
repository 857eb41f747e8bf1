"""The search on Optuna, without jobs: proposals honour each range and its scaling, seeds reproduce,
Grid runs the product once, Bayesian finds better than Random in the same budget, Hyperband's rungs and
promotion rule, SageMaker's median stopping rule, warm-start seeding, and a search that survives its process."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from shipyard.errors import ValidationError
from shipyard.spec.job import JobSpec
from shipyard.spec.tuning import TuningSpec
from shipyard.tuning.early_stopping import median_rule
from shipyard.tuning.search import Search
from shipyard.tuning.strategies.hyperband import promotable, rungs

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


def test_hyperband_rungs_and_asha_promotion_rule():
    assert rungs(1, 27) == [1, 3, 9] and rungs(3, 27) == [3, 9] and rungs(5, 5) == []
    at_rung = [1.0, 1.1, 0.9, 1.2, 5.0, 0.5]  # six configurations reached the rung: the best two go on
    assert [promotable(v, at_rung, minimize=True) for v in at_rung] == [False, False, True, False, False, True]
    assert promotable(5.0, [5.0], minimize=True)  # alone at a rung, the best there
    assert promotable(2.0, [1.0, 2.0], minimize=False) and not promotable(1.0, [1.0, 2.0], minimize=False)


@pytest.mark.parametrize("value, epoch, minimize, stop", [
    (2.0, 2, True, True),    # worse than the median of the running averages at epoch 2 (1.5)
    (1.4, 2, True, False),
    (1.4, 2, False, True),   # maximising, lower is worse
    (9.0, 4, True, False),   # fewer than three earlier trials reached epoch 4
])
def test_median_stopping_rule(value, epoch, minimize, stop):
    earlier = [[1.0, 1.0, 1.0], [2.0, 1.0], [3.0, 2.0, 1.0, 0.5]]  # running averages at epoch 2: 1.0, 1.5, 2.5
    reason = median_rule(value, epoch, earlier, minimize)
    assert (reason is not None) is stop
    if stop:
        assert f"at epoch {epoch}" in reason and "median 1.5 of 3 earlier trials" in reason


def test_warm_start_seeds_once_and_only_what_fits_the_ranges():
    search = Search(_spec([_range("continuous", "lr", 0.001, 0.1), _range("categorical", "act", values=["relu"])],
                          strategy="Random", max_jobs=5))
    assert search.seed("parent-001", None, {"lr": 0.01, "act": "tanh"}, 0.5)  # act is out of the ranges: lr only
    assert search.seed("parent-001", None, {"lr": 0.01}, 0.5)  # already there: not again
    assert not search.seed("parent-002", None, {"lr": 7.0}, 0.1)
    assert not search.seed("parent-003", "xgboost", {"lr": 0.01}, 0.1)  # a definition this search lacks
    (trial,) = search.study.trials
    assert trial.params == {"lr": 0.01} and trial.value == 0.5


def test_trials_asked_but_never_recorded_are_found_again(tmp_path):
    spec = _spec([_range("integer", "width", 8, 64)], strategy="Random", random_seed=1, max_jobs=4)
    first = Search(spec, tmp_path / "search.db")
    done, lost = first.ask(), first.ask()
    first.tell(done.number, 1.0)
    again = Search(spec, tmp_path / "search.db")
    assert again.unclaimed({done.number}) == [lost] and again.unclaimed({done.number, lost.number}) == []
    assert again.finished(done.number) and not again.finished(lost.number)


def test_a_search_in_sqlite_continues_in_a_new_process(tmp_path):
    spec = _spec([_range("integer", "width", 8, 64)], strategy="Random", random_seed=3, max_jobs=6)
    first = Search(spec, tmp_path / "search.db")
    for value in (3.0, 1.0, 2.0):
        proposal = first.ask()
        first.tell(proposal.number, value)
    again = Search(spec, tmp_path / "search.db")
    assert again.ask().number == 3
    assert again.study.best_value == 1.0


def _definition(name, ranges):
    training = JobSpec(job_name=f"t-{name}", output_path="file:///out", metric_definitions=(LOSS,),
                       hyperparameters={"sagemaker_program": '"train.py"'})
    return {"name": name, "training": training, "hyperparameter_ranges": ranges, "objective_metric_name": "loss"}


def test_with_several_estimators_each_trial_draws_one_and_only_its_ranges(tmp_path):
    spec = TuningSpec(tuning_job_name="multi", objective_type="Minimize", strategy="Bayesian", max_jobs=20,
                      random_seed=0, definitions=[_definition("a", [_range("continuous", "lr", 1e-4, 0.1)]),
                                                  _definition("b", [_range("integer", "lr", 8, 64)])])
    search = Search(spec, tmp_path / "study.db")
    seen = set()
    for _ in range(20):
        proposal = search.ask()
        seen.add(proposal.definition)
        value = proposal.hyperparameters["lr"]  # the same name, a range of each estimator's own
        assert list(proposal.hyperparameters) == ["lr"]
        assert isinstance(value, int) if proposal.definition == "b" else isinstance(value, float)
        search.tell(proposal.number, float(value) if proposal.definition == "a" else 1.0)
    assert seen == {"a", "b"}
    (lost,) = [Search(spec, tmp_path / "study.db").ask()]
    assert Search(spec, tmp_path / "study.db").unclaimed(set(range(20))) == [lost]  # with its definition


@pytest.mark.parametrize("fields, message", [
    ({"strategy": "Grid"}, r"strategy='Grid': tuning several estimators at once works with Bayesian or Random"),
    ({"names": ("a", "a")}, r"estimator_dict=\['a', 'a'\]: each estimator needs a name of its own"),
])
def test_several_estimators_refused(fields, message):
    names = fields.pop("names", ("a", "b"))
    with pytest.raises(ValidationError, match=message):
        TuningSpec(tuning_job_name="multi", definitions=[_definition(n, [_range("integer", "w", 1, 4)]) for n in names],
                   **fields)
