"""StalledTrainingRule (time, not tensors: the watcher asks it between steps) and how the watcher runs the
new rules: a rule's own StopTraining action, a rule that cannot start is Error with the reason."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from shipyard.rules.debugger.stalled_training_rule import StalledTrainingRule
from shipyard.rules.debugger.watcher import DebuggerRulesWatcher
from shipyard.spec.rules import RuleConfig
from tests.rules.conftest import Steps, make_rule


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    made = Clock()
    monkeypatch.setattr(StalledTrainingRule, "clock", staticmethod(made))
    return made


def test_stalled_training_fires_after_threshold_seconds_without_a_new_step(steps, clock):
    rule = make_rule("StalledTrainingRule", steps().trial(), threshold=60)
    assert not rule.invoke_at_step(0)
    clock.now += 59
    assert not rule.invoke_without_step()
    assert not rule.invoke_at_step(1)  # a new step: the count starts again
    clock.now += 61
    assert rule.invoke_without_step()
    assert "after step 1" in rule.finding and "threshold 60 s" in rule.finding
    assert rule.actions == ()


def test_stalled_training_a_step_after_a_long_gap_fires_and_stop_training_on_fire_adds_the_action(steps, clock):
    rule = make_rule("StalledTrainingRule", steps().trial(), threshold=10, stop_training_on_fire=True)
    clock.now += 11
    assert rule.invoke_at_step(0) and "after the rule started" in rule.finding
    assert [a.type for a in rule.actions] == ["stop_training"]


class Store:
    def __init__(self) -> None:
        self.statuses: dict[str, tuple[str, str]] = {}
        self.events: list[str] = []

    def set_rule_status(self, job, kind, name, status, details) -> None:
        self.statuses[name] = (status, details)

    def add_event(self, job, level, text) -> None:
        self.events.append(text)


def _watcher(tmp_path, *rules):
    spec = SimpleNamespace(job_name="job", output_path=str(tmp_path / "out"), debugger_hook_config=None,
                           rules=list(rules))
    store = Store()
    return DebuggerRulesWatcher(spec, store), store, Steps(tmp_path / "out" / "job" / "debug-output")


def test_the_watcher_asks_stalled_training_between_steps_and_stops_the_job(tmp_path, clock):
    config = RuleConfig(kind="debugger", name="stalled", rule="StalledTrainingRule",
                        parameters={"threshold": "30", "stop_training_on_fire": "True"})
    watcher, store, s = _watcher(tmp_path, config)
    s.add({"MSELoss_output_0": 1.0})
    s.add({"MSELoss_output_0": 0.9})
    assert watcher.poll() is None and store.statuses["stalled"][0] == "InProgress"
    clock.now += 31  # no new step since
    request = watcher.poll()
    assert request is not None and "stalled" in request.message
    status, details = store.statuses["stalled"]
    assert status == "IssuesFound" and "at step 1 resulted in the condition being met" in details


def test_a_rule_that_cannot_start_is_error_with_the_reason_and_others_run(tmp_path):
    source = tmp_path / "broken_rule.py"
    source.write_text("class Broken:\n    def __init__(self, base_trial, **parameters):\n"
                      "        raise RuntimeError('no model to compare with')\n")
    watcher, store, s = _watcher(
        tmp_path,
        RuleConfig(kind="debugger", name="broken", rule="custom", custom_source=str(source), custom_class="Broken"),
        RuleConfig(kind="debugger", name="zeros-w", rule="AllZero", parameters={"collection_names": "weights"}))
    s.add({"Net_fc1.weight": np.zeros(4)})
    watcher.finish()
    assert store.statuses["broken"][0] == "Error" and "no model to compare with" in store.statuses["broken"][1]
    assert store.statuses["zeros-w"][0] == "IssuesFound" and "Net_fc1.weight" in store.statuses["zeros-w"][1]


def test_parameters_that_only_make_sense_together_are_checked_when_the_rule_is_made():
    from shipyard.errors import ValidationError

    with pytest.raises(ValidationError, match="AllZero needs collection_names or tensor_regex"):
        RuleConfig(kind="debugger", name="zeros", rule="AllZero")
    with pytest.raises(ValidationError, match="2 token_values but 1 token_thresholds_percent"):
        RuleConfig(kind="debugger", name="nlp", rule="NLPSequenceRatio", parameters={"token_values": "0,1"})
    with pytest.raises(ValidationError, match="TensorVariance needs max_threshold or min_threshold"):
        RuleConfig(kind="debugger", name="var", rule="TensorVariance")


def test_every_registered_rule_validates_its_parameters_at_spec_time():
    from shipyard.errors import ValidationError

    with pytest.raises(ValidationError, match="threshold_layer"):
        RuleConfig(kind="debugger", name="d", rule="SaturatedActivation", parameters={"threshold_layer": "half"})
    with pytest.raises(ValidationError, match="patience"):
        RuleConfig(kind="debugger", name="o", rule="Overfit", parameters={"patience": "1.5"})
    with pytest.raises(ValidationError, match="stop_training_on_fire"):
        RuleConfig(kind="debugger", name="s", rule="StalledTrainingRule",
                   parameters={"stop_training_on_fire": "maybe"})


def test_with_every_worker_saving_each_worker_is_judged_on_its_own(tmp_path):
    """include_workers=all: worker_1's losses stall while worker_0's fall; the rule fires naming worker_1,
    and worker_0's falling loss does not hide it (a whole-trial rule would look at worker_0 only)."""
    from shipyard.contract.debugger.storage import Writer
    from shipyard.spec.debugger import DebuggerHookConfig

    spec = SimpleNamespace(job_name="job", output_path=str(tmp_path / "out"), rules=[
        RuleConfig(kind="debugger", name="loss", rule="LossNotDecreasing", parameters={"num_steps": "2"})],
        debugger_hook_config=DebuggerHookConfig(hook_parameters={"include_workers": "all"}))
    store = Store()
    watcher = DebuggerRulesWatcher(spec, store)
    root = tmp_path / "out" / "job" / "debug-output"
    writers = {w: Writer(root, w) for w in ("worker_0", "worker_1")}
    for step in range(6):
        for worker, loss in (("worker_0", 1.0 / (step + 1)), ("worker_1", 1.0)):
            value = np.asarray(loss)
            writers[worker].write_step(step, "train", step, {"MSELoss_output_0": value}, {
                "MSELoss_output_0": {"shape": [], "raw": True, "reductions": {}, "collections": ["losses"]}})
        assert watcher.poll() is None
    status, details = store.statuses["loss"]
    assert status == "IssuesFound", details
    assert "at step 2 resulted in the condition being met: worker_1: tensor MSELoss_output_0" in details
    assert sorted(watcher.runners[0].instances) == ["worker_0", "worker_1"]
