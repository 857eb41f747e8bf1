"""DeadRelu, SaturatedActivation and PoorWeightInitialization over synthetic activations."""
from __future__ import annotations

import numpy as np
import pytest

from tests.rules.conftest import first_firing

rng = np.random.default_rng(0)


def _healthy(shape=(32, 16)):
    return rng.normal(size=shape)


def test_dead_relu_fires_at_the_step_where_most_units_die(steps):
    s = steps()
    for _ in range(3):
        s.add({"fc1_relu_output_0": np.maximum(_healthy(), 0)})
    dead = np.maximum(_healthy(), 0)
    dead[:, :12] = 0  # 12 of 16 units never positive: 75% > 50%
    s.add({"fc1_relu_output_0": dead})
    step, rule = first_firing("DeadRelu", s.trial())
    assert step == 3
    assert "fc1_relu_output_0" in rule.finding and "75.0%" in rule.finding


def test_dead_relu_takes_pytorch_names_through_its_default_collection_and_a_given_regex_as_is(steps):
    s = steps()
    s.add({"relu1_output_0": np.zeros((8, 4))})  # `.*relu_output` does not match; the collection does
    assert first_firing("DeadRelu", s.trial())[0] == 0
    assert first_firing("DeadRelu", s.trial(), tensor_regex="other_output")[0] is None


def test_dead_relu_does_not_fire_on_a_healthy_layer_or_below_threshold_layer(steps):
    s = steps()
    half = np.maximum(_healthy(), 0)
    half[:, :8] = 0  # exactly 50% dead: not more than threshold_layer
    s.add({"fc1_relu_output_0": np.maximum(_healthy(), 0)})
    s.add({"fc1_relu_output_0": half})
    assert first_firing("DeadRelu", s.trial())[0] is None
    assert first_firing("DeadRelu", s.trial(), threshold_layer=40)[0] == 1


def test_saturated_activation_uses_each_activations_bounds(steps):
    s = steps()
    s.add({"tanh1_input_0": _healthy(), "sigmoid1_input_0": _healthy()})
    saturated = _healthy() * 3
    saturated[:, :10] = 12.0  # beyond tanh's 9.4999 but inside sigmoid's (-23, 16.99999)
    s.add({"tanh1_input_0": _healthy(), "sigmoid1_input_0": saturated})
    assert first_firing("SaturatedActivation", s.trial())[0] is None
    s.add({"tanh1_input_0": saturated, "sigmoid1_input_0": _healthy()})
    step, rule = first_firing("SaturatedActivation", s.trial())
    assert step == 2 and "tanh1_input_0" in rule.finding and "62.5%" in rule.finding


def test_poor_weight_initialization_variance_ratio_gradient_range_and_loss(steps):
    s = steps()
    s.add({"relu1_input_0": _healthy(), "relu2_input_0": _healthy() * 2, "gradient/Net_fc1.weight": _healthy(),
           "MSELoss_output_0": 1.0})
    s.add({"relu1_input_0": _healthy(), "relu2_input_0": _healthy() * 5, "gradient/Net_fc1.weight": _healthy(),
           "MSELoss_output_0": 0.9})  # variance ratio about 25 > 10
    step, rule = first_firing("PoorWeightInitialization", s.trial())
    assert step == 1 and "relu2_input_0" in rule.finding and "relu1_input_0" in rule.finding
    # a ratio of 25 is fine with threshold 100; past `steps` nothing is judged
    assert first_firing("PoorWeightInitialization", s.trial(), threshold=100)[0] is None
    assert first_firing("PoorWeightInitialization", s.trial(), steps=1)[0] is None

    flat = steps("flat")
    flat.add({"gradient/Net_fc1.weight": _healthy() * 1e-5, "MSELoss_output_0": 1.0})
    step, rule = first_firing("PoorWeightInitialization", flat.trial())
    assert step == 0 and "gradient/Net_fc1.weight" in rule.finding

    stuck = steps("stuck")
    for loss in (1.0, 0.8, 0.9, 0.85, 0.81, 0.82, 0.83, 0.9):
        stuck.add({"MSELoss_output_0": loss})
    step, rule = first_firing("PoorWeightInitialization", stuck.trial(), patience=5)
    assert step == 6 and "MSELoss_output_0" in rule.finding  # best 0.8 at step 1, no lower by step 6
    assert first_firing("PoorWeightInitialization", stuck.trial(), patience=7)[0] is None


@pytest.mark.parametrize("rule", ["DeadRelu", "SaturatedActivation", "PoorWeightInitialization"])
def test_activation_rules_ignore_steps_without_their_tensors(steps, rule):
    s = steps()
    s.add({"Net_fc1.weight": _healthy()})
    assert first_firing(rule, s.trial())[0] is None
