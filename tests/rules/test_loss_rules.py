"""LossNotDecreasing (with its mode parameter), Overfit and Overtraining over synthetic losses in train and
eval modes (contract 1: each step's mode and mode step in the index, trial.mode_of)."""
from __future__ import annotations

import pytest

from tests.rules.conftest import first_firing, make_rule

LOSS = "CrossEntropyLoss_output_0"


def test_loss_not_decreasing_compares_within_a_mode(steps):
    s = steps()
    # train losses fall steadily; eval losses (interleaved, higher) stall from eval step 2 on
    evals = iter([5.0, 4.0, 4.0, 4.0, 4.0])
    for i in range(20):
        s.add({LOSS: 3.0 - 0.1 * i})
        if i % 4 == 3:
            s.add({LOSS: next(evals)}, mode="eval")
    t = s.trial()
    assert first_firing("LossNotDecreasing", t, num_steps=2, mode="train")[0] is None
    step, rule = first_firing("LossNotDecreasing", t, num_steps=2, mode="eval")
    # checked every 2 eval steps: eval 2 (4.0) against eval 0 (5.0) fell, eval 4 against eval 2 did not
    assert t.mode_of(step) == ("eval", 4) and LOSS in rule.finding and "eval step 4" in rule.finding
    # unset: each mode on its own, so the same eval stall, and train losses never meet eval ones
    assert first_firing("LossNotDecreasing", t, num_steps=2)[0] == step
    # global: compared across modes by global step, the interleaved higher eval losses look like a rise
    step, _ = first_firing("LossNotDecreasing", t, num_steps=2, mode="global")
    assert t.mode_of(step) == ("eval", 0)


def test_loss_not_decreasing_rejects_an_unknown_mode(steps):
    with pytest.raises(ValueError, match="unknown mode"):
        make_rule("LossNotDecreasing", steps().trial(), mode="testing")


def _epochs(s, train_losses, eval_losses):
    """Alternating phases: one list of train losses then one of eval losses, per epoch."""
    for train, evaluation in zip(train_losses, eval_losses):
        for loss in train:
            s.add({LOSS: loss})
        for loss in evaluation:
            s.add({LOSS: loss}, mode="eval")


def test_overfit_fires_when_validation_loss_runs_away_from_training_loss(steps):
    s = steps()
    _epochs(s, [[1.0, 0.9], [0.5, 0.4]], [[0.95, 0.96], [0.9, 0.9]])
    t = s.trial()
    step, rule = first_firing("Overfit", t)
    # epoch 1: train mean 0.95, validation 0.95: fine; epoch 2: train 0.45, validation 0.9: r = 1
    assert t.mode_of(step) == ("eval", 2) and LOSS in rule.finding
    assert first_firing("Overfit", t, ratio_threshold=1.5)[0] is None
    assert first_firing("Overfit", t, patience=2)[0] == t.global_step("eval", 3)
    assert first_firing("Overfit", t, patience=3)[0] is None


def test_overfit_needs_a_training_loss_first_and_respects_start_step(steps):
    s = steps()
    s.add({LOSS: 2.0}, mode="eval")  # no training loss yet: nothing to compare with
    _epochs(s, [[0.5]], [[1.0]])
    t = s.trial()
    assert first_firing("Overfit", t)[0] == 2
    assert first_firing("Overfit", t, start_step=3)[0] is None


def test_overtraining_patience_per_mode(steps):
    s = steps()
    for loss in (1.0, 0.8, 0.6, 0.595, 0.594, 0.593):  # no improvement by more than 0.01 after 0.6
        s.add({LOSS: loss})
    t = s.trial()
    assert first_firing("Overtraining", t)[0] is None  # 3 stale train steps < patience_train 5
    step, rule = first_firing("Overtraining", t, patience_train=3)
    assert step == 5 and LOSS in rule.finding and "train" in rule.finding
    assert first_firing("Overtraining", t, patience_train=3, delta=0.001)[0] is None
    v = steps("validation")
    for i in range(12):
        v.add({LOSS: 1.0 - 0.1 * i})
        v.add({LOSS: 0.5 + 0.01 * i}, mode="eval")  # validation only gets worse
    t = v.trial()
    step, rule = first_firing("Overtraining", t)
    assert t.mode_of(step) == ("eval", 10) and "eval" in rule.finding


def test_overfit_keeps_evaluations_apart_when_the_training_between_saved_no_loss(steps):
    s = steps()
    for i in range(3):
        s.add({"MSELoss_output_0": 1.0}, mode="train")
    for _ in range(2):
        s.add({"MSELoss_output_0": 1.0}, mode="eval")  # as good as training: no overfitting yet
    s.next_step, s.mode_steps["train"] = 10, 8  # five training steps saved nothing
    for _ in range(2):
        s.add({"MSELoss_output_0": 1.2}, mode="eval")  # this evaluation alone: ratio 0.2
    step, rule = first_firing("Overfit", s.trial())
    assert step == 10, rule.finding  # merged with the first evaluation, the mean would stay below 1.1
