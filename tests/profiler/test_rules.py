"""Each profiler rule's formula on synthetic data: data built to trigger it, and data that must not."""

from __future__ import annotations

import random

import pytest

from shipyard.rules.profiler.base import percentages
from shipyard.rules.profiler.data import FrameworkEvent, ProfilerData, StepEvent
from shipyard.spec.rule_parameters import parse_parameters
from shipyard.spec.rules import rule_module


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


def loading(seconds, processes, node="algo-1", start=1000.0, per_second=4, duration=0.05,
            name="DataLoaderWorker") -> list[FrameworkEvent]:
    """Dataloader events: each second, `per_second` batches fetched by each of `processes` OS processes."""
    return [FrameworkEvent(name, node, 0, pid, None, start + t + i / per_second, duration, {"worker_pid": pid})
            for t in range(seconds) for pid in processes for i in range(per_second)]


def initialize(num_workers, pin_memory, node="algo-1") -> FrameworkEvent:
    return FrameworkEvent("DataLoaderIterInitialize", node, 0, 100, None, 999.0, 0.001,
                          {"num_workers": num_workers, "pin_memory": pin_memory, "os_pid": 100})


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
    assert usage["CPU"]["p50"] == 50 and usage["CPU memory"]["max"] == 40
    assert usage["Network"]["min"] == pytest.approx(100e-6)  # 100 bytes/s, in MB/s


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
    assert finding.triggered and "algo-1 gpu0 and algo-1 gpu1 differ (Jensen-Shannon distance 0.83)" in finding.details  # sqrt(ln 2)
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


# -- Dataloader ------------------------------------------------------------------------------------------
def test_dataloader_fires_with_too_few_loader_processes_for_the_cores():
    starved = ProfilerData(system=system(5, cpus=(10,) * 4), events=loading(12, [100], name="DataLoaderIter")
                           + [initialize(0, False)])
    finding = evaluate("Dataloader", starved)
    assert finding.triggered and finding.violations == 1 and finding.datapoints == 48
    assert finding.details == ("algo-1: median 1 parallel dataloader processes for 4 cores (num_workers=0, "
                               "pin_memory=False), below 70% of the cores (2.8)")
    assert finding.stats["algo-1"]["dataloading_time"] == {"p25": 0.05, "p50": 0.05, "p95": 0.05}
    assert not evaluate("Dataloader", starved, min_threshold=25).triggered  # 1 >= 4 * 25%
    assert not evaluate("Dataloader", starved, patience=12).triggered  # 12 seconds are not more than 12


def test_dataloader_quiet_with_a_worker_per_core_and_fires_with_far_too_many():
    cores = system(5, cpus=(10,) * 4)
    healthy = loading(12, [100], name="DataLoaderIter") + loading(12, [101, 102, 103, 104])
    finding = evaluate("Dataloader", ProfilerData(system=cores, events=healthy + [initialize(4, True)]))
    assert not finding.triggered and "median 5 parallel dataloader processes for 4 cores" in finding.details
    crowded = loading(12, range(200, 210))
    finding = evaluate("Dataloader", ProfilerData(system=cores, events=crowded))
    assert finding.triggered and "median 10" in finding.details and "above 200% of the cores (8)" in finding.details


def test_dataloader_counts_processes_per_second_by_event_start():
    # Two workers taking turns, one batch a second each: each second sees one process only.
    turns = [FrameworkEvent("DataLoaderWorker", "algo-1", 0, 101 + t % 2, None, 1000.0 + t, 0.9, {})
             for t in range(12)]
    finding = evaluate("Dataloader", ProfilerData(system=system(3, cpus=(10, 10)), events=turns))
    assert finding.triggered and finding.stats["algo-1"]["dataloaders"] == 1
    assert finding.stats["algo-1"]["processes"] == 2


def test_dataloader_without_events_says_so():
    finding = evaluate("Dataloader", ProfilerData(system=system(3, cpus=(10,)), steps=steps([0.1] * 5)))
    assert not finding.triggered and "no dataloader events" in finding.details


# -- OverallFrameworkMetrics -----------------------------------------------------------------------------
def _phases(node="algo-1", n=10, forward=0.02, backward=0.05, optimizer=0.01, wait=0.02) -> ProfilerData:
    step_list = steps([0.1] * n, node)
    events = []
    for s in step_list:
        t = s.start
        for name, d in (("DataLoaderIter", wait), ("Forward", forward), ("Backward(post-forward)", backward),
                        ("Optimizer", optimizer)):
            events.append(FrameworkEvent(name, node, 0, 100, s.step, t, d, {}))
            t += d
    return ProfilerData(steps=step_list, events=events)


def test_overall_framework_metrics_splits_the_step_time_and_never_fires():
    data = _phases()
    data.steps += [StepEvent("algo-1", 0, 100, 1005.0, 0.5, mode="EVAL")]  # 4s after the last train step
    finding = evaluate("OverallFrameworkMetrics", data)
    assert not finding.triggered
    total = finding.stats["all"]
    assert {k: round(v, 6) for k, v in total["steps"].items()} == {"TRAIN": 1.0, "EVAL": 0.5}
    assert abs(total["others"] - 4.0) < 1e-9  # train steps 1000..1001, the eval step 1005..1005.5
    assert {k: round(v, 3) for k, v in total["phases"].items()} == {
        "Forward": 0.2, "Backward(post-forward)": 0.5, "Optimizer": 0.1}
    assert round(total["dataloader_wait"], 3) == 0.2
    assert round(total["general"]["Backward(post-forward)"], 1) == 50.0
    # The step time's parts: the phases, the dataloader wait and the rest (the EVAL step, 0.5 s), in whole %
    # that add up to 100, as the finding says them and the report draws them.
    parts = total["step_parts"]
    assert list(parts) == ["Forward", "Backward(post-forward)", "Optimizer", "dataloader wait", "rest of the step"]
    assert sum(parts.values()) == 100 and all(share == int(share) for share in parts.values())
    assert parts["Optimizer"] == 7 and parts["Forward"] in (13, 14) and parts["Backward(post-forward)"] in (33, 34)
    assert "step time: " + ", ".join(f"{name} {share:.0f}%" for name, share in parts.items()) in finding.details
    assert finding.details.startswith("11 steps, 1.5s of step time on 1 node(s)")
    assert total["modes"] == {"TRAIN steps": 18, "EVAL steps": 9, "others": 73}  # of 5.5 s: 1 s, 0.5 s, 4 s
    short = evaluate("OverallFrameworkMetrics", ProfilerData(steps=steps([0.003] * 12)))
    assert short.details.startswith("12 steps, 0.036s of step time")  # not 0.0s


def test_overall_framework_metrics_drops_operations_under_two_percent():
    finding = evaluate("OverallFrameworkMetrics", _phases(optimizer=0.0005))
    assert "Optimizer" not in finding.stats["all"]["general"] and "Optimizer" in finding.stats["all"]["phases"]
    assert "no framework events" in evaluate("OverallFrameworkMetrics", ProfilerData(system=system(2, cpus=(1,)))).details


def test_profiler_report_runs_the_twelve_rules():
    from shipyard.rules.profiler.profiler_report import SUB_RULES
    from shipyard.spec.rules import RULES

    assert len(RULES["profiler"]) == 12 and set(SUB_RULES) == set(RULES["profiler"]) - {"ProfilerReport"}
    data = ProfilerData(system=system(5, cpus=(10,) * 4), events=loading(12, [100], name="DataLoaderIter"))
    finding = evaluate("ProfilerReport", data)
    assert finding.triggered and "Dataloader: algo-1: median 1" in finding.details
    assert not evaluate("ProfilerReport", data, Dataloader_min_threshold=10).triggered


# -- Every rule over all nodes: the second node of a 2-node job has the problem -----------------------------
def _two_nodes(healthy: dict, sick: dict, n=30) -> ProfilerData:
    return ProfilerData(system=system(n, node="algo-1", **healthy) + system(n, node="algo-2", **sick))


MULTI_NODE = {
    "CPUBottleneck": (_two_nodes({"cpus": (20, 20), "gpus": (90,)}, {"cpus": (95, 20), "gpus": (5,)}, n=60),
                      {"patience": 10, "threshold": 40}, "60 of 120 snapshots"),
    "IOBottleneck": (_two_nodes({"cpus": (20,), "gpus": (90,)}, {"cpus": (20,), "gpus": (5,), "iowait": 80}, n=60),
                     {"patience": 10, "threshold": 40}, "60 of 120 snapshots"),
    "LowGPUUtilization": (_two_nodes({"cpus": (20,), "gpus": (90, 90)}, {"cpus": (20,), "gpus": (90, 20)}),
                          {"patience": 10, "window": 20}, "algo-2 gpu1 underutilised"),
    "BatchSize": (_two_nodes({"cpus": (90,), "gpus": (10,)}, {"cpus": (20,), "gpus": (10,)}),
                  {"patience": 10, "window": 20}, "algo-2 gpu0"),
    "LoadBalancing": (_two_nodes({"cpus": (20,), "gpus": (95,)}, {"cpus": (20,), "gpus": (5,)}),
                      {"patience": 10}, "algo-1 gpu0 and algo-2 gpu0 differ"),
}


def test_every_system_rule_looks_at_every_node():
    for rule, (data, params, expected) in MULTI_NODE.items():
        finding = evaluate(rule, data, **params)
        assert finding.triggered and expected in finding.details and "algo-1" not in finding.details.replace(
            "algo-1 gpu0 and", ""), (rule, finding.details)
        healthy = ProfilerData(system=[r for r in data.system if r["NodeId"] == "algo-1"])
        assert not evaluate(rule, healthy, **params).triggered, rule


def test_gpu_memory_increase_step_outlier_and_dataloader_per_node():
    memory = _gpu_memory([20.0] * 31) + [{**r, "NodeId": "algo-2"} for r in _gpu_memory([20.0] * 30 + [90.0])]
    finding = evaluate("GPUMemoryIncrease", ProfilerData(system=memory), patience=20, window=5)
    assert finding.triggered and finding.details.startswith("algo-2 gpu0 memory rose")

    durations = [0.1] * 150
    durations[110] = 3.0
    finding = evaluate("StepOutlier", ProfilerData(steps=steps([0.1] * 150) + steps(durations, "algo-2")), n_outliers=0)
    assert finding.triggered and finding.step == 111 and "TRAIN step(s) on algo-2" in finding.details
    assert finding.stats["algo-1"]["TRAIN"]["outliers"] == [] and finding.stats["algo-2"]["TRAIN"]["outliers"] == [(111, 3.0)]
    events = loading(12, [100], node="algo-2", name="DataLoaderIter") + loading(12, [100, 101], node="algo-1")
    both = ProfilerData(system=system(3, node="algo-1", cpus=(1, 1)) + system(3, node="algo-2", cpus=(1,) * 4),
                        events=events)
    finding = evaluate("Dataloader", both)
    assert finding.triggered and finding.violations == 1 and finding.details.startswith("algo-2: median 1")
    assert set(finding.stats) == {"algo-1", "algo-2"}


def test_step_outlier_separates_train_and_eval_steps():
    train = steps([0.1] * 150)
    evals = [StepEvent("algo-1", 0, i, 2000.0 + i, 1.0, mode="EVAL") for i in range(150)]
    data = ProfilerData(steps=train + evals)  # EVAL steps are 10x longer: not outliers of TRAIN ones
    assert not evaluate("StepOutlier", data, n_outliers=0).triggered
    assert evaluate("StepOutlier", ProfilerData(steps=steps([0.1] * 149 + [1.0])), n_outliers=0).triggered
    assert evaluate("StepOutlier", data, n_outliers=0, mode="EVAL").datapoints == 150


# -- Shares --------------------------------------------------------------------------------------------------
def test_percentages_add_up_to_100_where_rounding_each_would_not():
    assert percentages({"a": 1, "b": 1, "c": 1}) == {"a": 34, "b": 33, "c": 33}  # not 33 + 33 + 33
    assert percentages({"a": 1, "b": 1, "c": 1}, decimals=1) == {"a": 33.4, "b": 33.3, "c": 33.3}
    assert sorted(percentages({"x": 0.5, "y": 0.5, "z": 99}).values()) == [0, 1, 99]  # not 1 + 1 + 99
    rng = random.Random(1)
    for _ in range(100):
        parts = {str(i): rng.uniform(0, 10) for i in range(rng.randint(1, 12))}
        assert sum(percentages(parts).values()) == 100
        assert round(sum(percentages(parts, decimals=1).values()), 6) == 100
    assert percentages({"a": 0.0, "b": -1.0}) == {} and percentages({"a": 2.0, "b": -1.0}) == {"a": 100, "b": 0}
