"""SageMaker's SaveConfig semantics (smdebug/core/save_config.py), per mode, and how a collection's own
keys override the hook's."""
from __future__ import annotations

import pytest

from shipyard.contract.debugger.collections import build
from shipyard.contract.debugger.save_config import SaveConfig


def saved(parameters, mode="train", upto=40, base=None):
    config = SaveConfig.from_parameters(parameters, base=base)
    return [s for s in range(upto) if config.should_save(mode, s)]


def test_default_interval_is_500():
    assert saved({}, upto=1501) == [0, 500, 1000, 1500]


def test_interval_is_on_the_absolute_step_from_start_to_exclusive_end():
    assert saved({"save_interval": "10", "start_step": "15", "end_step": "40"}, upto=60) == [20, 30]
    assert saved({"save_interval": "100", "start_step": "150"}, upto=401) == [200, 300, 400]


def test_save_steps_add_to_the_interval_schedule():
    assert saved({"save_steps": "3,7"}, upto=501) == [0, 3, 7, 500]
    # save_steps are saved even outside start_step..end_step
    assert saved({"save_steps": "3", "start_step": "10", "save_interval": "10"}, upto=25) == [3, 10, 20]


def test_end_step_zero_saves_nothing():
    assert saved({"end_step": "0", "save_interval": "1"}) == []


def test_each_mode_overrides_and_global_sets_every_mode():
    params = {"global.save_interval": "4", "eval.save_interval": "3", "train.end_step": "9"}
    assert saved(params, "train", 20) == [0, 4, 8]
    assert saved(params, "eval", 10) == [0, 3, 6, 9]
    assert saved(params, "predict", 10) == [0, 4, 8]
    # an unprefixed key is every mode's default, a mode's own key wins whatever the order
    assert saved({"train.save_interval": "5", "save_interval": "2"}, "train", 11) == [0, 5, 10]
    assert saved({"train.save_interval": "5", "save_interval": "2"}, "eval", 5) == [0, 2, 4]


def test_a_collection_overrides_the_hook_per_key_and_mode():
    hook = SaveConfig.from_parameters({"save_interval": "10", "eval.save_interval": "5"})
    grads = build("gradients", {"train.save_interval": "2"}, hook, (), False)
    assert saved({}, "train", 7, base=grads.save_config) == [0, 2, 4, 6]
    assert saved({}, "eval", 11, base=grads.save_config) == [0, 5, 10]  # the hook's eval config stays
    losses = build("losses", {}, hook, ("mean",), False)
    assert losses.reductions == () and losses.save_raw_tensor  # a scalar keeps its raw value


@pytest.mark.parametrize("key,value,message", [
    ("save_interval", "0", "at least 1"), ("start_step", "-1", "non-negative"),
    ("save_steps", "1,-2", "non-negative"), ("save_interval", "ten", "invalid literal")])
def test_bad_values_say_why(key, value, message):
    with pytest.raises(ValueError, match=message):
        SaveConfig.from_parameters({key: value})
