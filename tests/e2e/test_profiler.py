"""The profiler end to end, as a user would try it: a 2-instance job with profiler_config and profiler
rules gets system metrics from both instances and step times, StepOutlier flags the one slow step,
statuses show in describe, and `shipyard report` writes an HTML file with the charts. A job without
profiler_config starts no monitor."""

from __future__ import annotations

import json
import textwrap

import pytest

from shipyard.profiler import FrameworkProfile, ProfilerConfig, ProfilerRule, rule_configs
from shipyard.pytorch import PyTorch
from shipyard.rules.profiler.data import ProfilerReader

pytestmark = pytest.mark.slow

SCRIPT = """
    import time
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = DataLoader(TensorDataset(torch.randn(180 * 8, 4)), batch_size=8)
    for step, (x,) in enumerate(batches, start=1):
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        if step == 150:
            time.sleep(2.0)  # the one outlier step
        time.sleep(0.01)
        optimizer.step()
"""


def _estimator(tmp_path, **extra) -> PyTorch:
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    (source / "train.py").write_text(textwrap.dedent(SCRIPT))
    return PyTorch(entry_point="train.py", source_dir=str(source), instance_count=2, framework_version="2.1",
                   py_version="py3", output_path=str(tmp_path / "out"), **extra)


def test_profiled_job_metrics_rules_and_report(home, tmp_path):
    from click.testing import CliRunner

    from shipyard.cli.main import cli
    from shipyard.store import Store

    est = _estimator(
        tmp_path,
        profiler_config=ProfilerConfig(system_monitor_interval_millis=200,
                                       framework_profile_params=FrameworkProfile()),
        # stddev 8: the 2 s step is far over the limit (~1.2 s), a step stalled by a busy machine is not
        rules=[ProfilerRule.sagemaker(rule_configs.StepOutlier(), rule_parameters={"n_outliers": 0, "stddev": 8}),
               ProfilerRule.sagemaker(rule_configs.LowGPUUtilization()),
               ProfilerRule.sagemaker(rule_configs.ProfilerReport(), rule_parameters={"StepOutlier_n_outliers": 0})],
    )
    est.fit(logs=False)
    job = est.latest_training_job.name
    description = est.latest_training_job.describe()
    assert description["ProfilingStatus"] == "Enabled"
    assert description["ProfilerConfig"]["ProfilingIntervalInMilliseconds"] == 200
    statuses = {s["RuleConfigurationName"]: s for s in description["ProfilerRuleEvaluationStatuses"]}
    assert statuses["StepOutlier"]["RuleEvaluationStatus"] == "IssuesFound"
    assert "Evaluation of the rule StepOutlier at step 150 resulted in the condition being met" in \
        statuses["StepOutlier"]["StatusDetails"]
    assert statuses["ProfilerReport"]["RuleEvaluationStatus"] == "IssuesFound"
    assert statuses["LowGPUUtilization"]["RuleEvaluationStatus"] == "NoIssuesFound"
    assert "no GPU" in statuses["LowGPUUtilization"]["StatusDetails"]

    published = tmp_path / "out" / job / "rule-output" / "ProfilerReport" / "profiler-output" / "profiler-report.html"
    assert "algo-1 step durations" in published.read_text()  # where SageMaker's ProfilerReport leaves it

    data = ProfilerReader(str(tmp_path / "out" / job / "profiler-output")).read()
    assert {r["NodeId"] for r in data.system} == {"algo-1", "algo-2"}
    assert {r["Type"] for r in data.system} >= {"cpu", "memory", "i/o", "network"}
    for node in ("algo-1", "algo-2"):
        numbers = [s.step for s in data.step_durations(node)]
        assert numbers == list(range(2, 181)), node
        slow = max(data.step_durations(node), key=lambda s: s.duration)
        assert slow.step == 150 and slow.duration >= 2.0
        assert all(0 < s.dataloader < s.duration for s in data.step_durations(node))

    result = CliRunner().invoke(cli, ["report", job])
    assert result.exit_code == 0, result.output
    report = Store().job_dir(job) / "profiler-report.html"
    assert result.output.strip() == str(report)
    html = report.read_text()
    assert html.count("<svg") >= 4  # utilisation and step durations for each instance
    assert "algo-2 utilisation" in html and "algo-1 step durations" in html
    assert "algo-1 dataloader wait and compute per step" in html
    assert "StepOutlier" in html and "Check for jobs or processes running beside training" in html
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched


def test_job_without_profiler_config_starts_no_monitor(home, tmp_path):
    est = _estimator(tmp_path)
    est.fit(logs=False)
    job = est.latest_training_job.name
    assert est.latest_training_job.describe()["ProfilingStatus"] == "Disabled"
    assert not (tmp_path / "out" / job / "profiler-output").exists()
    from shipyard.store import Store

    agent = json.loads((Store().job_dir(job) / "instances" / "algo-1" / "agent.json").read_text())
    assert agent["profiler"] is None
