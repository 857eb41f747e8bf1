"""AllZero, TensorVariance, UnchangedTensor, WeightUpdateRatio, SimilarAcrossRuns and ExplodingTensor over
synthetic tensors."""
from __future__ import annotations

import numpy as np
import pytest

from tests.rules.conftest import first_firing, make_rule

W = "Net_fc1.weight"


def test_all_zero_fires_on_a_zero_tensor_of_the_chosen_collection_or_regex(steps):
    s = steps()
    s.add({W: np.ones((4, 4)), "fc1_output_0": np.ones((2, 4))})
    s.add({W: np.zeros((4, 4)), "fc1_output_0": np.ones((2, 4))})
    step, rule = first_firing("AllZero", s.trial(), collection_names="weights")
    assert step == 1 and W in rule.finding and "100.0%" in rule.finding
    assert first_firing("AllZero", s.trial(), tensor_regex="fc1_output")[0] is None
    half = steps("half")
    half.add({W: np.array([0.0, 0.0, 1.0, 2.0])})
    assert first_firing("AllZero", half.trial(), tensor_regex="fc1")[0] is None  # 50% < 100%
    assert first_firing("AllZero", half.trial(), tensor_regex="fc1", threshold=50)[0] == 0


def test_all_zero_without_collection_names_or_tensor_regex_cannot_start(steps):
    with pytest.raises(ValueError, match="collection_names or tensor_regex"):
        make_rule("AllZero", steps().trial())


def test_tensor_variance_bounds(steps):
    s = steps()
    s.add({W: np.array([1.0, -1.0])})  # variance 1
    s.add({W: np.array([3.0, -3.0])})  # variance 9
    step, rule = first_firing("TensorVariance", s.trial(), tensor_regex="fc1", max_threshold=4)
    assert step == 1 and W in rule.finding and "variance 9" in rule.finding
    assert first_firing("TensorVariance", s.trial(), tensor_regex="fc1", min_threshold=2)[0] == 0
    assert first_firing("TensorVariance", s.trial(), tensor_regex="fc1", min_threshold=0.5, max_threshold=10)[0] is None
    with pytest.raises(ValueError, match="max_threshold or min_threshold"):
        make_rule("TensorVariance", s.trial())


def test_unchanged_tensor_over_the_last_num_steps_saved_steps(steps):
    s = steps()
    for step, value in ((0, 1.0), (5, 2.0), (10, 2.0), (20, 2.0 + 1e-9)):
        s.add({W: np.full(3, value), "fc1_output_0": np.full(2, float(step))}, step=step)
    step, rule = first_firing("UnchangedTensor", s.trial())
    assert step == 20 and W in rule.finding and "5, 10, 20" in rule.finding
    assert first_firing("UnchangedTensor", s.trial(), num_steps=4)[0] is None
    assert first_firing("UnchangedTensor", s.trial(), tensor_regex="output")[0] is None
    assert first_firing("UnchangedTensor", s.trial(), atol=1.5, rtol=0, num_steps=4)[0] == 20


def test_weight_update_ratio_between_train_steps_only(steps):
    s = steps()
    w = np.ones(100)
    s.add({W: w}, step=0, mode_step=0)
    s.add({W: w + 0.01}, step=10, mode_step=10)  # ratio 0.01
    s.add({W: w + 0.01}, mode="eval", step=11)  # weights do not move in evaluation: not a finding
    s.add({W: w + 0.01}, step=21, mode_step=20)  # ratio 0: below small_threshold
    step, rule = first_firing("WeightUpdateRatio", s.trial())
    assert step == 21 and W in rule.finding and "train steps 10 and 20" in rule.finding
    assert first_firing("WeightUpdateRatio", s.trial(), small_threshold=0)[0] is None
    big = steps("big")
    big.add({W: w})
    big.add({W: w * 50})  # ratio 49
    assert first_firing("WeightUpdateRatio", big.trial())[0] == 1
    assert first_firing("WeightUpdateRatio", big.trial(), large_threshold=100)[0] is None


def test_weight_update_ratio_num_steps_skips_a_previous_step_too_far_back(steps):
    s = steps()
    s.add({W: np.ones(4)}, step=0, mode_step=0)
    s.add({W: np.ones(4) * 100}, step=10, mode_step=10)
    assert first_firing("WeightUpdateRatio", s.trial())[0] == 10
    assert first_firing("WeightUpdateRatio", s.trial(), num_steps=5)[0] is None


def test_similar_across_runs_compares_the_same_step_of_another_trial(steps):
    a, b = steps("a"), steps("b")
    for step in range(3):
        a.add({W: np.full(4, float(step))})
        b.add({W: np.full(4, float(step) + (1.0 if step == 2 else 0.0))})
    other = str(b.root)
    step, rule = first_firing("SimilarAcrossRuns", a.trial(), other_trials=other)
    assert step == 2 and W in rule.finding and other in rule.finding
    same = steps("same")
    for step in range(3):
        same.add({W: np.full(4, float(step))})
    assert first_firing("SimilarAcrossRuns", a.trial(), other_trials=str(same.root))[0] is None
    with pytest.raises(ValueError, match="needs other_trials"):
        make_rule("SimilarAcrossRuns", a.trial())


def test_exploding_tensor_nan_and_inf(steps):
    s = steps()
    s.add({W: np.ones(3)})
    s.add({W: np.array([1.0, np.inf, 0.0])})
    s.add({W: np.array([1.0, np.nan, 0.0])})
    step, rule = first_firing("ExplodingTensor", s.trial())
    assert step == 1 and W in rule.finding
    assert first_firing("ExplodingTensor", s.trial(), only_nan=True)[0] == 2
