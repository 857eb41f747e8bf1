"""What fit() / `shipyard jobs wait` print when a job ends: the seconds SageMaker's SDK prints (per
instance times instances, saying so) and every rule's final status with its finding."""

from __future__ import annotations

import io

from rich.console import Console

from shipyard.sdk.watch import _print_outcome


def _printed(description: dict) -> str:
    out = io.StringIO()
    _print_outcome(Console(file=out, width=200, color_system=None), None, description)
    return out.getvalue()


DESCRIPTION = {
    "TrainingJobName": "job", "TrainingJobStatus": "Completed", "SecondaryStatus": "Completed",
    "TrainingTimeInSeconds": 25, "BillableTimeInSeconds": 26,
    "ResourceConfig": {"InstanceCount": 2, "InstanceType": "local"},
    "ModelArtifacts": {"S3ModelArtifacts": "file:///out/job/output/model.tar.gz"},
    "DebugRuleEvaluationStatuses": [
        {"RuleConfigurationName": "LossNotDecreasing", "RuleEvaluationStatus": "IssuesFound",
         "StatusDetails": "Evaluation of the rule LossNotDecreasing at step 8 resulted in the condition being met"}],
    "ProfilerRuleEvaluationStatuses": [
        {"RuleConfigurationName": "ProfilerReport", "RuleEvaluationStatus": "NoIssuesFound", "StatusDetails": "x"},
        {"RuleConfigurationName": "StepOutlier", "RuleEvaluationStatus": "Error",
         "StatusDetails": "Traceback (most recent call last):\n  ...\nValueError: no steps"}],
}


def test_seconds_say_they_are_per_instance_times_instances():
    printed = _printed(DESCRIPTION)
    assert "Training seconds: 50 (25 s x 2 instances)\n" in printed
    assert "Billable seconds: 52 (26 s x 2 instances)\n" in printed
    one = _printed({**DESCRIPTION, "ResourceConfig": {"InstanceCount": 1, "InstanceType": "local"}})
    assert "Training seconds: 25\n" in one and "x 1 instances" not in one


def test_every_rule_s_final_status_and_finding_is_printed():
    lines = _printed(DESCRIPTION).splitlines()
    start = lines.index("Rules:")
    assert [line.split()[:2] for line in lines[start + 1:start + 4]] == [
        ["LossNotDecreasing", "IssuesFound"], ["ProfilerReport", "NoIssuesFound"], ["StepOutlier", "Error"]]
    assert lines[start + 1].endswith("at step 8 resulted in the condition being met")
    assert lines[start + 2].endswith("NoIssuesFound")             # no details for a rule that found nothing
    assert lines[start + 3].endswith("Error  ValueError: no steps")  # a traceback's last line
    assert "Rules:" not in _printed({k: v for k, v in DESCRIPTION.items() if "Rule" not in k})
