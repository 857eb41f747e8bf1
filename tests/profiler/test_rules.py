"""Each profiler rule's formula on synthetic data: data built to trigger it, and data that must not."""

from __future__ import annotations

import random

from shipyard.profiler.data import ProfilerData, StepEvent
from shipyard.rules import rule_module
from shipyard.rules.parameters import parse_parameters


def evaluate(rule: str, data: ProfilerData, now: float = 1e9, final: bool = True, **params):
    module = rule_module("profiler", rule)
    typed = parse_parameters(rule, module.PARAMETERS, {k: str(v) for k, v in params.items()})
    return module.evaluate(data, typed, now, final)


def steps(durations, node="algo-1") -> list[StepEvent]:
    out, t = [], 1000.0
    for i, d in enumerate(durations, start=1):
        out.append(StepEvent(node, 0, i, t, d))
        t += d
    return out


def snapshot(ts, node="algo-1", cpus=(), gpus=(), memory=50.0, iowait=0.0) -> list[dict]:
    rec = lambda t, n, d, v: {"Type": t, "Name": n, "Dimension": d, "Value": v, "NodeId": node, "Timestamp": ts}
    records = [rec("cpu", f"cpu{i}", "CPUUtilization", v) for i, v in enumerate(cpus)]
    records += [rec("cpu", f"cpu{i}", "I/OWaitPercentage", iowait) for i in range(len(cpus))]
    records += [rec("gpu", f"gpu{i}", "GPUUtilization", v) for i, v in enumerate(gpus)]
    records += [rec("gpu", f"gpu{i}", "GPUMemoryUtilization", 30.0) for i in range(len(gpus))]
    records.append(rec("memory", "MemoryUsedPercent", "", memory))
    records.append(rec("network", "ReceiveBytesPerSecond", "Algorithm", 100.0))
    return records


def system(n, **kwargs) -> list[dict]:
    return [r for i in range(n) for r in snapshot(100.0 + i * 0.5, **kwargs)]


# -- StepOutlier ---------------------------------------------------------------------------------------
def test_step_outlier_fires_on_a_slow_step_and_names_it():
    rng = random.Random(0)
    durations = [0.1 + rng.uniform(-0.005, 0.005) for _ in range(150)]
    durations[120] = 2.0  # step 121
    finding = evaluate("StepOutlier", ProfilerData(steps=steps(durations)), n_outliers=0)
    assert finding.triggered and finding.step == 121 and finding.violations == 1
    assert not evaluate("StepOutlier", ProfilerData(steps=steps(durations))).triggered  # 1 <= n_outliers 10


def test_step_outlier_needs_more_than_100_steps_and_even_steps_pass():
    durations = [0.1] * 100 + [5.0]
    assert not evaluate("StepOutlier", ProfilerData(steps=steps(durations[:100] + [5.0])[:100]), n_outliers=0).triggered
    rng = random.Random(1)
    even = [0.1 + rng.uniform(-0.001, 0.001) for _ in range(300)]
    assert not evaluate("StepOutlier", ProfilerData(steps=steps(even)), n_outliers=0, stddev=5).triggered


def test_step_outlier_is_per_node():
    quick, slow = steps([0.01] * 150, "algo-1"), steps([1.0] * 150, "algo-2")
    assert not evaluate("StepOutlier", ProfilerData(steps=quick + slow), n_outliers=0).triggered


# -- CPUBottleneck ---------------------------------------------------------------------------------------
def test_cpu_bottleneck_fires_when_gpus_wait_for_busy_cores():
    data = ProfilerData(system=system(30, cpus=(95, 20), gpus=(5,)))
    finding = evaluate("CPUBottleneck", data, patience=10)
    assert finding.triggered and finding.violations == 30 and finding.datapoints == 30
    assert not evaluate("CPUBottleneck", data).triggered  # patience 1000 not reached


def test_cpu_bottleneck_quiet_with_busy_gpus_or_without_gpus():
    assert not evaluate("CPUBottleneck", ProfilerData(system=system(30, cpus=(95,), gpus=(80,))), patience=10).triggered
    finding = evaluate("CPUBottleneck", ProfilerData(system=system(30, cpus=(99, 99))), patience=10)
    assert not finding.triggered and finding.violations == 0
    half = system(10, cpus=(95,), gpus=(5,)) + [
        {**r, "Timestamp": r["Timestamp"] + 100} for r in system(12, cpus=(10,), gpus=(5,))]
    assert not evaluate("CPUBottleneck", ProfilerData(system=half), patience=10).triggered  # 10/22 < 50%


# -- LowGPUUtilization ---------------------------------------------------------------------------------
def test_low_gpu_utilization_underused_and_fluctuating():
    low = ProfilerData(system=system(30, cpus=(10,), gpus=(20,)))
    assert evaluate("LowGPUUtilization", low, patience=10, window=20).triggered
    swinging = ProfilerData(system=[r for i in range(30) for r in snapshot(100 + i, cpus=(10,), gpus=(95 if i % 2 else 0,))])
    finding = evaluate("LowGPUUtilization", swinging, patience=10, window=20)
    assert finding.triggered and "fluctuating" in finding.details
    busy = ProfilerData(system=system(30, cpus=(10,), gpus=(90,)))
    assert not evaluate("LowGPUUtilization", busy, patience=10, window=20).triggered


def test_low_gpu_utilization_without_gpus_says_so():
    finding = evaluate("LowGPUUtilization", ProfilerData(system=system(30, cpus=(10,))), patience=10)
    assert not finding.triggered and "no GPU" in finding.details


# -- OverallSystemUsage ----------------------------------------------------------------------------------
def test_overall_system_usage_never_fires_and_averages_cores():
    finding = evaluate("OverallSystemUsage", ProfilerData(system=system(10, cpus=(100, 0), memory=40)))
    assert not finding.triggered
    usage = finding.stats["algo-1"]
    assert usage["CPU"]["p50"] == 50 and usage["CPU memory"]["max"] == 40 and usage["Network"]["min"] == 100


# -- MaxInitializationTime -------------------------------------------------------------------------------
def test_max_initialization_time_fires_without_steps_after_threshold():
    data = ProfilerData(system=system(4, cpus=(10,)))  # t = 100 .. 101.5
    assert evaluate("MaxInitializationTime", data, now=100 + 2 * 60, final=False, threshold=1).triggered
    assert not evaluate("MaxInitializationTime", data, now=100 + 30, final=False, threshold=1).triggered
    with_steps = ProfilerData(system=data.system, steps=steps([0.1] * 5))
    finding = evaluate("MaxInitializationTime", with_steps, now=100 + 3600, final=False, threshold=1)
    assert not finding.triggered and finding.stats["initialization_seconds"] == 900


# -- ProfilerReport --------------------------------------------------------------------------------------
def test_profiler_report_fires_when_a_sub_rule_does_with_prefixed_parameters():
    durations = [0.1] * 150
    durations[130] = 3.0
    data = ProfilerData(system=system(5, cpus=(10,)), steps=steps(durations))
    finding = evaluate("ProfilerReport", data, StepOutlier_n_outliers=0)
    assert finding.triggered and finding.step == 131 and "StepOutlier" in finding.details
    assert not evaluate("ProfilerReport", data).triggered


# -- IOBottleneck ------------------------------------------------------------------------------------------
def test_io_bottleneck_fires_when_gpus_wait_for_io():
    assert evaluate("IOBottleneck", ProfilerData(system=system(30, cpus=(10, 10), gpus=(5,), iowait=80)),
                    patience=10).triggered
    assert not evaluate("IOBottleneck", ProfilerData(system=system(30, cpus=(10, 10), gpus=(5,), iowait=20)),
                        patience=10).triggered
    assert not evaluate("IOBottleneck", ProfilerData(system=system(30, cpus=(10,), gpus=(90,), iowait=80)),
                        patience=10).triggered


# -- GPUMemoryIncrease -------------------------------------------------------------------------------------
def _gpu_memory(values) -> list[dict]:
    return [{"Type": "gpu", "Name": "gpu0", "Dimension": "GPUMemoryUtilization", "Value": v, "NodeId": "algo-1",
             "Timestamp": 100.0 + i} for i, v in enumerate(values)]


def test_gpu_memory_increase_fires_on_a_jump_not_on_steady_use():
    jump = _gpu_memory([20.0] * 30 + [90.0])
    finding = evaluate("GPUMemoryIncrease", ProfilerData(system=jump), patience=20, window=5)
    assert finding.triggered and "gpu0 memory rose 14.0%" in finding.details  # (90-20)/5
    assert not evaluate("GPUMemoryIncrease", ProfilerData(system=_gpu_memory([20.0] * 31)), patience=20, window=5).triggered
    assert "no GPU" in evaluate("GPUMemoryIncrease", ProfilerData(system=system(5, cpus=(1,)))).details


# -- LoadBalancing -----------------------------------------------------------------------------------------
def test_load_balancing_compares_gpus_of_a_node():
    unbalanced = ProfilerData(system=system(30, cpus=(10,), gpus=(95, 5)))
    finding = evaluate("LoadBalancing", unbalanced, patience=10)
    assert finding.triggered and "gpu0 and gpu1 differ (Jensen-Shannon distance 0.83)" in finding.details  # sqrt(ln 2)
    assert not evaluate("LoadBalancing", ProfilerData(system=system(30, cpus=(10,), gpus=(60, 61))), patience=10).triggered
    assert not evaluate("LoadBalancing", unbalanced).triggered  # patience 1000


# -- BatchSize ---------------------------------------------------------------------------------------------
def test_batch_size_fires_when_cpu_gpu_and_gpu_memory_are_all_low():
    idle = ProfilerData(system=system(30, cpus=(20, 30), gpus=(10,)))  # GPU memory 30% in snapshot()
    finding = evaluate("BatchSize", idle, patience=10, window=20)
    assert finding.triggered and "p95 utilisation 10%" in finding.details
    busy_cpu = ProfilerData(system=system(30, cpus=(90, 95), gpus=(10,)))
    assert not evaluate("BatchSize", busy_cpu, patience=10, window=20).triggered
    busy_gpu = ProfilerData(system=system(30, cpus=(20,), gpus=(90,)))
    assert not evaluate("BatchSize", busy_gpu, patience=10, window=20).triggered
