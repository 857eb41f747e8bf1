"""Debugger jobs end to end through the SDK: tensors saved without script changes, read back with
trial(), rules judged beside the job."""
from __future__ import annotations

from pathlib import Path

import pytest

from shipyard.debugger import DebuggerHookConfig, Rule, rule_configs, trial
from shipyard.pytorch import PyTorch
from shipyard.store.db import Store

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).parent / "scripts"


def _fit(tmp_path, name, hyperparameters, **kwargs):
    est = PyTorch(entry_point=str(SCRIPTS / "debug_net.py"), instance_count=1, framework_version="2.3",
                  py_version="py311", output_path=str(tmp_path / "out"), hyperparameters=hyperparameters,
                  **kwargs)
    est.fit(job_name=name, wait=True, logs=False)
    return Store().get_job(name)


def _statuses(job):
    from shipyard.control.describe import describe

    return {s["RuleConfigurationName"]: s for s in describe(Store(), job.name).get("DebugRuleEvaluationStatuses", [])}


def test_vanishing_gradient_in_a_deep_sigmoid_net(home, tmp_path):
    rule = Rule.sagemaker(rule_configs.vanishing_gradient(), rule_parameters={"threshold": "1e-4"})
    hook = DebuggerHookConfig(hook_parameters={"save_interval": "5"})
    job = _fit(tmp_path, "vg-sigmoid", {"kind": "sigmoid", "steps": 12}, rules=[rule], debugger_hook_config=hook)
    status = _statuses(job)["VanishingGradient"]
    assert status["RuleEvaluationStatus"] == "IssuesFound", status
    assert "at step 0 resulted in the condition being met" in status["StatusDetails"]
    t = trial(job.name)
    assert t.steps() == [0, 5, 10]
    assert any(n.startswith("gradient/") for n in t.tensor_names(collection="gradients"))


def test_healthy_net_gives_no_issues_and_nothing_asked_saves_nothing(home, tmp_path):
    rule = Rule.sagemaker(rule_configs.vanishing_gradient())
    job = _fit(tmp_path, "vg-relu", {"kind": "relu", "steps": 12}, rules=[rule],
               debugger_hook_config=DebuggerHookConfig(hook_parameters={"save_interval": "5"}))
    assert _statuses(job)["VanishingGradient"]["RuleEvaluationStatus"] == "NoIssuesFound"
    plain = _fit(tmp_path, "plain", {"kind": "relu", "steps": 3})
    assert plain.spec.debugger_hook_config is None
    assert not (tmp_path / "out" / "plain" / "debug-output").exists()
