"""DebuggerHookConfig / CollectionConfig reject bad input when made, naming the field, the value and the
fix (directly, and through the SDK's job-file path, as shipyard's ValidationError)."""
from __future__ import annotations

import pytest

from shipyard.contract.debugger.collections import BUILTIN_REGEX
from shipyard.debugger import CollectionConfig, DebuggerHookConfig
from shipyard.debugger.sdk import hook_and_rules
from shipyard.errors import ValidationError


@pytest.mark.parametrize("make,expected", [
    (lambda: CollectionConfig(name="gradient"), "did you mean 'gradients'"),
    (lambda: CollectionConfig(name="relu_inputs"), "did you mean 'relu_input'"),
    (lambda: DebuggerHookConfig(hook_parameters={"save_interval": "0"}), "save_interval must be at least 1"),
    (lambda: DebuggerHookConfig(hook_parameters={"eval.end_step": "-3"}), "end_step must be non-negative"),
    (lambda: DebuggerHookConfig(hook_parameters={"train.save_intervals": "3"}),
     "did you mean 'train.save_interval'"),
    (lambda: CollectionConfig(name="mine", parameters={"include_regex": "a(("}), "include_regex='a\\(\\(': missing \\)"),
    (lambda: DebuggerHookConfig(hook_parameters={"reductions": "mean,median"}), "unknown reduction 'median'"),
    (lambda: CollectionConfig(name="weights", parameters={"save_histogram": "yes"}), "must be True or False"),
    (lambda: DebuggerHookConfig(hook_parameters={"include_workers": "some"}), "must be 'one' or 'all'"),
])
def test_bad_input_names_the_fix(make, expected):
    with pytest.raises(ValueError, match=expected):
        make()


def test_the_job_file_path_gives_shipyards_validation_error():
    with pytest.raises(ValidationError) as info:
        hook_and_rules([], {"collection_configs": [{"name": "gradient"}]})
    assert info.value.field.startswith("debugger_hook_config") and "did you mean 'gradients'" in str(info.value)


def test_sagemakers_regex_collections_are_built_in_and_a_new_one_needs_a_regex():
    for name in ("relu_input", "relu_output", "tanh_input", "sigmoid_input", "input_image", "input_sequence",
                 "inputs", "outputs", "labels", "predictions"):
        assert CollectionConfig(name=name).name in BUILTIN_REGEX
    assert CollectionConfig(name="mine", parameters={"include_regex": "fc1_.*"}).parameters
    with pytest.raises(ValueError, match="needs an include_regex"):
        CollectionConfig(name="mine")


@pytest.mark.parametrize("collection,hits,misses", [
    ("relu_input", ["relu1_input_0", "block.relu_input_0"], ["relu1_output_0", "fc1_input_0"]),
    ("relu_output", ["relu1_output_0"], ["relu1_input_0"]),
    ("tanh_input", ["tanh_input_0", "act.tanh2_input_0"], ["sigmoid_input_0"]),
    ("sigmoid_input", ["sigmoid3_input_0"], ["tanh_input_0"]),
    ("input_image", ["Net_input_0", "ResNet18_input_0"], ["MSELoss_input_0", "conv1_input_0", "Net_input_1"]),
    ("input_sequence", ["embedding_input_0", "encoder.embedding_input_0"], ["fc_input_0"]),
    ("inputs", ["fc1_input_0"], ["fc1_output_0"]),
    ("losses", ["MSELoss_output_0", "CrossEntropyLoss_output_0"], ["MSELoss_input_0"]),
    ("weights", ["Net_fc1.weight"], ["gradient/Net_fc1.weight"]),
])
def test_builtin_regexes_name_the_tensors_the_hook_writes(collection, hits, misses):
    import re

    pattern = re.compile(BUILTIN_REGEX[collection])
    assert [n for n in hits if pattern.search(n)] == hits
    assert [n for n in misses if pattern.search(n)] == []


def test_the_users_collection_settings_win_over_a_rules():
    from shipyard.debugger import Rule, rule_configs

    mine = DebuggerHookConfig(collection_configs=[CollectionConfig(name="gradients", parameters={"save_interval": "5"})])
    _, hook = hook_and_rules([Rule.sagemaker(rule_configs.vanishing_gradient())], mine)
    assert [(c.name, c.parameters) for c in hook.collection_configs] == [("gradients", {"save_interval": "5"})]
