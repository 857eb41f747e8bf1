"""Built-in and custom debugger rules judging real jobs through the SDK: plain PyTorch scripts built to
trigger a rule (and twins that must not), the rule's status and trigger step asserted, and StopTraining
ending a job early, asserted by the step its log stops at."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from shipyard.debugger import CollectionConfig, DebuggerHookConfig, Rule, StopTrainingAction, rule_configs, trial
from shipyard.pytorch import PyTorch
from shipyard.store.db import Store

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).parent / "scripts"
EVERY_STEP = DebuggerHookConfig(hook_parameters={"save_interval": "1"})


def _fit(tmp_path, name, script, hyperparameters, **kwargs):
    est = PyTorch(entry_point=str(SCRIPTS / script), instance_count=1, framework_version="2.3",
                  py_version="py311", output_path=str(tmp_path / "out"), hyperparameters=hyperparameters,
                  **kwargs)
    est.fit(job_name=name, wait=True, logs=False)
    return Store().get_job(name)


def _statuses(job):
    from shipyard.control.describe import describe

    return {s["RuleConfigurationName"]: s for s in describe(Store(), job.name).get("DebugRuleEvaluationStatuses", [])}


def _trigger_step(status) -> int:
    assert status["RuleEvaluationStatus"] == "IssuesFound", status
    return int(re.search(r"at step (\d+) resulted in the condition being met", status["StatusDetails"]).group(1))


def _logged_losses(job) -> dict[int, float]:
    text = Store().log_path(job.name, "algo-1").read_text()
    return {int(s): float(v) for s, v in re.findall(r"^step (\d+) loss (\S+)$", text, re.M)}


def test_exploding_tensor_with_a_huge_learning_rate(home, tmp_path):
    rule = Rule.sagemaker(rule_configs.exploding_tensor())
    job = _fit(tmp_path, "explode", "rules_mlp.py", {"lr": 5, "steps": 8}, rules=[rule],
               debugger_hook_config=EVERY_STEP)
    status = _statuses(job)["ExplodingTensor"]
    first_bad = min(s for s, loss in _logged_losses(job).items() if not math.isfinite(loss))
    assert _trigger_step(status) == first_bad
    assert "MSELoss_output_0" in status["StatusDetails"]


def test_loss_not_decreasing_stops_the_job_soon_after_it_fires(home, tmp_path):
    rule = Rule.sagemaker(rule_configs.loss_not_decreasing(), actions=[StopTrainingAction()],
                          collections_to_save=[CollectionConfig(name="losses", parameters={"save_interval": "1"})])
    steps = 300
    with pytest.warns(UserWarning, match="job plateau was stopped"):
        job = _fit(tmp_path, "plateau", "rules_mlp.py", {"plateau_after": 20, "steps": steps, "sleep": 0.2},
                   rules=[rule], debugger_hook_config=EVERY_STEP)
    # the learning rate is 0 from step 20: checked every 10 steps, step 30 is the first not below step 20
    assert _trigger_step(_statuses(job)["LossNotDecreasing"]) == 30
    assert job.status == "Stopped"
    stopping = [t for t in job.transitions if t.status == "Stopping"]
    assert stopping and "Stopped by rule LossNotDecreasing" in stopping[0].message, job.transitions
    last = max(_logged_losses(job))
    # watched every 2 s, synced every second, 0.2 s a step: stopped within seconds (here about 11 steps
    # later; up to 30 s allowed for a loaded machine), long before the last step
    assert 30 <= last <= 30 + 150 < steps - 1, last


def test_dead_relu_on_a_dead_net_and_a_custom_rule_on_a_healthy_one(home, tmp_path):
    relu_every_step = [CollectionConfig(name="relu_output", parameters={"save_interval": "1"})]
    dead_rule = Rule.sagemaker(rule_configs.dead_relu(), collections_to_save=relu_every_step)
    dead = _fit(tmp_path, "dead", "rules_mlp.py", {"dead": 1, "steps": 5}, rules=[dead_rule],
                debugger_hook_config=EVERY_STEP)
    status = _statuses(dead)["DeadRelu"]
    assert _trigger_step(status) == 0 and "fc1_relu_output_0" in status["StatusDetails"]

    custom = Rule.custom(name="loss-below", source=str(SCRIPTS / "rules_custom.py"), rule_to_invoke="LossBelow",
                         rule_parameters={"threshold": "6.9"})
    healthy = _fit(tmp_path, "alive", "rules_mlp.py", {"steps": 12},
                   rules=[Rule.sagemaker(rule_configs.dead_relu(), collections_to_save=relu_every_step), custom],
                   debugger_hook_config=EVERY_STEP)
    statuses = _statuses(healthy)
    assert statuses["DeadRelu"]["RuleEvaluationStatus"] == "NoIssuesFound", statuses["DeadRelu"]
    assert "fc1_relu_output_0" in trial(healthy.name).tensor_names(collection="relu_output")
    losses = _logged_losses(healthy)
    assert _trigger_step(statuses["loss-below"]) == min(s for s, loss in losses.items() if loss < 6.9) > 0


def test_overfit_on_a_tiny_training_set_and_not_on_a_large_one(home, tmp_path):
    losses_every_step = [CollectionConfig(name="losses", parameters={"train.save_interval": "1",
                                                                     "eval.save_interval": "1"})]
    rule = Rule.sagemaker(rule_configs.overfit(), collections_to_save=losses_every_step)
    tiny = _fit(tmp_path, "tiny", "rules_overfit.py", {"train_size": 16, "steps": 30}, rules=[rule])
    step = _trigger_step(_statuses(tiny)["Overfit"])
    t = trial(tiny.name)
    assert t.mode_of(step)[0] == "eval" and t.steps(mode="eval") == [0, 1, 2]

    rule = Rule.sagemaker(rule_configs.overfit(), collections_to_save=losses_every_step)
    large = _fit(tmp_path, "large", "rules_overfit.py", {"train_size": 50000, "steps": 30}, rules=[rule])
    assert _statuses(large)["Overfit"]["RuleEvaluationStatus"] == "NoIssuesFound"
    assert trial(large.name).steps(mode="eval") == [0, 1, 2]
