"""Profiling changed on a running job, written as SageMaker's documentation writes it
(estimator.enable_default_profiling(), estimator.update_profiler(...), estimator.disable_profiling()):
the instance's system monitor starts, samples at the new interval, and stops; running training
processes follow new framework settings from their next step; profiler rules added while the job runs
are evaluated, and those running when profiling is turned off end Stopped. Each script trains until the
test puts `done` in a FileSystemInput channel, so every update lands while it runs."""

from __future__ import annotations

import statistics
import textwrap
import time

import pytest

from shipyard.errors import ValidationError
from shipyard.inputs import FileSystemInput
from shipyard.profiler import (
    DataloaderProfilingConfig,
    FrameworkProfile,
    ProfilerConfig,
    ProfilerRule,
    rule_configs,
)
from shipyard.pytorch import PyTorch
from shipyard.rules.profiler.data import ProfilerReader
from shipyard.store import Store

pytestmark = pytest.mark.slow

SCRIPT = """
    import time
    from pathlib import Path
    import torch
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    done, step, deadline = Path("/opt/ml/input/data/signal/done"), 0, time.time() + 120
    while not done.exists() and time.time() < deadline:
        step += 1
        loss = model(torch.randn(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step}", flush=True)
        time.sleep(0.02)
    print(f"trained {step} steps", flush=True)
"""
# From an update to the instance: the controller looks every 2 s, the agent every 0.2 s, a training
# process at a step's end every second.
LATENCY = 4.0


def _start(tmp_path, **extra) -> tuple[PyTorch, object]:
    source, signal = tmp_path / "src", tmp_path / "signal"
    source.mkdir()
    signal.mkdir()
    (source / "train.py").write_text(textwrap.dedent(SCRIPT))
    est = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=1, framework_version="2.1",
                  py_version="py3", output_path=str(tmp_path / "out"), **extra)
    est.fit({"signal": FileSystemInput(file_system_id="fs-1", file_system_type="EFS", directory_path=str(signal))},
            wait=False)
    return est, signal / "done"


def _steps(log) -> int:
    lines = [line for line in log.read_text().splitlines() if "| step " in line or line.startswith("step ")]
    return int(lines[-1].rsplit(" ", 1)[1]) if lines else 0


def _wait_for_steps(log, at_least: int, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while (log.exists() and _steps(log)) < at_least:
        assert time.monotonic() < deadline, f"the script never reached step {at_least}"
        time.sleep(0.2)
    return _steps(log)


def _profiler_output(est) -> str:
    return f"{est.output_path}/{est.latest_training_job.name}/profiler-output"


def _samples(est) -> list[float]:
    """When algo-1's system monitor sampled (cpu0's CPUUtilization, one per sample)."""
    data = ProfilerReader(_profiler_output(est)).read()
    return sorted(r["Timestamp"] for r in data.system if r["Name"] == "cpu0" and r["Dimension"] == "CPUUtilization")


def test_monitoring_enabled_changed_and_disabled_on_a_running_job(home, tmp_path):
    est, done = _start(tmp_path)
    log = Store().log_path(est.latest_training_job.name, "algo-1")
    _wait_for_steps(log, 10)
    assert est.latest_training_job.describe()["ProfilingStatus"] == "Disabled"

    enabled = time.time()
    est.enable_default_profiling()
    description = est.latest_training_job.describe()
    assert description["ProfilingStatus"] == "Enabled"
    assert description["ProfilerConfig"]["ProfilingIntervalInMilliseconds"] == 500
    assert [r["RuleConfigurationName"] for r in description["ProfilerRuleConfigurations"]] == ["ProfilerReport"]
    with pytest.raises(ValidationError, match="already enabled; change it with update_profiler"):
        est.enable_default_profiling()

    deadline = time.monotonic() + 30
    while len(_samples(est)) < 4:   # the monitor started on the running instance and its files are synced
        assert time.monotonic() < deadline, "no system metrics after enable_default_profiling()"
        time.sleep(0.5)
    faster = time.time()
    est.update_profiler(system_monitor_interval_millis=100, framework_profile_params=FrameworkProfile())
    assert est.profiler_config.system_monitor_interval_millis == 100
    time.sleep(LATENCY + 2)
    disabled = time.time()
    est.disable_profiling()
    assert est.latest_training_job.describe()["ProfilingStatus"] == "Disabled"
    with pytest.raises(ValidationError, match="profiling is already disabled"):
        est.disable_profiling()
    time.sleep(LATENCY + 3)   # the job runs on, unmonitored
    done.touch()
    description = est.latest_training_job.wait(logs=False)

    samples = _samples(est)
    assert samples[0] > enabled
    before = [t for t in samples if t < faster]
    after = [t for t in samples if faster + LATENCY < t < disabled]
    assert 0.4 < statistics.median(b - a for a, b in zip(before, before[1:])) < 0.8
    assert len(after) >= 10 and statistics.median(b - a for a, b in zip(after, after[1:])) < 0.25
    assert max(samples) < disabled + LATENCY, "samples after disable_profiling()"
    statuses = {s["RuleConfigurationName"]: s["RuleEvaluationStatus"]
                for s in description["ProfilerRuleEvaluationStatuses"]}
    assert statuses == {"ProfilerReport": "Stopped"}
    # The processes started without framework metrics: they cannot begin now, and the job says so.
    assert any("framework metrics begin when the training processes next start" in w
               for w in description["Shipyard"]["Warnings"])
    with pytest.raises(ValidationError, match="is Completed: profiling can only be changed while the job is in"):
        est.update_profiler(system_monitor_interval_millis=500)
    # What it recorded while profiling was on is in its report.
    from shipyard.rules.profiler.report import write_report

    assert "algo-1 utilisation" in write_report(Store(), est.latest_training_job.name).read_text()


def test_running_processes_follow_framework_updates_and_added_rules_run(home, tmp_path):
    first = FrameworkProfile(start_step=2, num_steps=4,   # only the step timeline: steps 2-5
                             dataloader_profiling_config=DataloaderProfilingConfig(start_step=1, num_steps=1))
    est, done = _start(tmp_path, profiler_config=ProfilerConfig(framework_profile_params=first))
    log = Store().log_path(est.latest_training_job.name, "algo-1")
    updated_at = _wait_for_steps(log, 30)
    est.update_profiler(rules=[ProfilerRule.sagemaker(rule_configs.CPUBottleneck())],
                        framework_profile_params=FrameworkProfile(
                            start_step=1, num_steps=1_000_000,
                            dataloader_profiling_config=DataloaderProfilingConfig(start_step=1, num_steps=1)))
    with pytest.raises(ValidationError, match="only new profiler rules can be added"):
        est.update_profiler(rules=[ProfilerRule.sagemaker(rule_configs.CPUBottleneck())])
    time.sleep(LATENCY + 2)
    stopped_at = _steps(log)
    est.update_profiler(disable_framework_metrics=True)
    time.sleep(LATENCY + 2)
    done.touch()
    description = est.latest_training_job.wait(logs=False)
    trained = int(log.read_text().rsplit("trained ", 1)[1].split()[0])

    steps = [s.step for s in ProfilerReader(_profiler_output(est)).read().step_durations("algo-1")]
    assert steps[:4] == [2, 3, 4, 5]
    followed = steps[4:]
    assert followed and followed[0] > updated_at, "steps recorded before the update reached the process"
    assert followed == list(range(followed[0], followed[-1] + 1))   # every step while the update was in force
    assert stopped_at < followed[-1] < trained - 20, "framework metrics went on after disable_framework_metrics"
    assert "ProfilingParameters" not in description["ProfilerConfig"]
    statuses = {s["RuleConfigurationName"]: s["RuleEvaluationStatus"]
                for s in description["ProfilerRuleEvaluationStatuses"]}
    assert statuses["CPUBottleneck"] in ("NoIssuesFound", "IssuesFound")
    assert "CPUBottleneck" in [r["RuleConfigurationName"] for r in description["ProfilerRuleConfigurations"]]
