"""ClassImbalance, Confusion, CheckInputImages and NLPSequenceRatio over synthetic labels, predictions,
images and token sequences."""
from __future__ import annotations

import numpy as np
import pytest

from tests.rules.conftest import first_firing, make_rule

rng = np.random.default_rng(0)


def test_class_imbalance_after_enough_samples(steps):
    s = steps()
    for _ in range(5):
        labels = np.array([0] * 95 + [1] * 5)  # 19 to 1
        s.add({"labels": labels, "predictions": labels})
    step, rule = first_firing("ClassImbalance", s.trial())
    assert step == 4 and "labels" in rule.finding and "class 0" in rule.finding  # 500 samples at step 4
    assert first_firing("ClassImbalance", s.trial(), threshold_imbalance=20)[0] is None
    assert first_firing("ClassImbalance", s.trial(), samples=100)[0] == 0


def test_class_imbalance_mispredictions_with_argmax(steps):
    s = steps()
    labels = np.tile([0, 1], 50)
    probabilities = np.zeros((100, 2))
    probabilities[:, 0] = 1.0  # always predicts class 0: class 1 is always wrong
    s.add({"labels": labels, "predictions": probabilities})
    step, rule = first_firing("ClassImbalance", s.trial(), samples=100, argmax=True)
    assert step == 0 and "predictions" in rule.finding and "class 1" in rule.finding
    good = steps("good")
    good.add({"labels": labels, "predictions": np.eye(2)[labels]})
    assert first_firing("ClassImbalance", good.trial(), samples=100, argmax=True)[0] is None


def test_confusion_column_shares(steps):
    s = steps()
    labels = rng.integers(0, 3, size=200)
    s.add({"labels": labels, "predictions": labels})
    confused = labels.copy()
    confused[labels == 2] = 1  # class 2 is predicted as 1
    s.add({"labels": labels, "predictions": confused})
    step, rule = first_firing("Confusion", s.trial())
    assert step == 1 and "predictions" in rule.finding and "class 1" in rule.finding
    assert first_firing("Confusion", s.trial(), min_diag=0.5, max_off_diag=0.5)[0] is None


def test_check_input_images_not_zero_centred(steps):
    s = steps()
    for _ in range(3):
        images = rng.normal(size=(200, 3, 4, 4))
        images[:, 1] += 0.5  # channel 1 is off centre
        s.add({"Net_input_0": images})  # the model's input: the input_image collection
    step, rule = first_firing("CheckInputImages", s.trial())
    assert step == 2 and "Net_input_0" in rule.finding and "channel 1" in rule.finding  # 600 >= 500 images
    assert first_firing("CheckInputImages", s.trial(), threshold_mean=0.7)[0] is None
    centred = steps("centred")
    centred.add({"Net_input_0": rng.normal(size=(600, 3, 4, 4))})
    assert first_firing("CheckInputImages", centred.trial())[0] is None


def test_nlp_sequence_ratio_padding_share(steps):
    s = steps()
    ok = rng.integers(1, 100, size=(8, 20))
    ok[:, 15:] = 0  # 25% padding
    padded = ok.copy()
    padded[:, 5:] = 0  # 75% padding
    s.add({"embedding_input_0": ok})
    s.add({"embedding_input_0": padded})
    step, rule = first_firing("NLPSequenceRatio", s.trial())
    assert step == 1 and "embedding_input_0" in rule.finding and "75.0%" in rule.finding
    assert first_firing("NLPSequenceRatio", s.trial(), token_values="0,1", token_thresholds_percent="80,50")[0] is None
    with pytest.raises(ValueError, match="one threshold per token value"):
        make_rule("NLPSequenceRatio", s.trial(), token_values="0,1")
    with pytest.raises(ValueError, match="comma-separated numbers"):
        make_rule("NLPSequenceRatio", s.trial(), token_values="pad")
