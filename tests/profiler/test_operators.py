"""The detailed torch.profiler traces' operators: a real trace written through detailed.py's own code path
(a tiny model on the CPU) read back by ProfilerReader, a GPU kernel added to it (the GPU side without a
GPU), how nested CPU operators are counted, and OverallFrameworkMetrics' split and top operators."""

from __future__ import annotations

import glob
import json
import os
import time

import pytest

from shipyard.rules.profiler.data import ProfilerData, ProfilerReader
from shipyard.rules.profiler.operators import parse_detailed_trace, summary
from shipyard.runtime.profiler.detailed import DetailedProfiler
from tests.profiler.test_rules import evaluate, steps

TRACE = "framework/pytorch/detailed_profiling/2026110912/000000003/algo-1-rank0.pt.trace.json"


@pytest.fixture(scope="module")
def real_trace(tmp_path_factory) -> str:
    """Steps 3 and 4 of a tiny MLP, profiled as a job's DetailedProfilingConfig profiles them."""
    import torch

    root = tmp_path_factory.mktemp("profiler-output")
    # Large enough for the matrix products to outweigh the small operators on a loaded machine.
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    profiler = DetailedProfiler(str(root), "algo-1", 0)
    for step in (1, 2, 3, 4):
        if step >= 3:  # steps 1 and 2 unprofiled, as a job's: first calls out of the way
            (profiler.start if step == 3 else profiler.next_step)(step, time.time())
        loss = model(torch.randn(128, 64)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    profiler.stop(4, time.time())
    return str(root)


def _events(root: str) -> list[dict]:
    [path] = glob.glob(f"{root}/framework/pytorch/detailed_profiling/*/000000003/algo-1-rank0.pt.trace.json")
    return json.load(open(path))["traceEvents"]


def test_a_cpu_trace_is_all_cpu_with_linear_and_addmm_on_top(real_trace):
    data = ProfilerReader(real_trace).read()
    [trace] = data.operators
    assert (trace.node, trace.rank) == ("algo-1", 0) and data.nodes == ["algo-1"]
    events = _events(real_trace)
    operators = [e for e in events if e.get("cat") == "cpu_op"]
    marks = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    # Top-level operators only: less than all cpu_op time, no more than the two steps' time.
    assert 0 < trace.cpu < sum(e["dur"] for e in operators) / 1e6
    assert trace.cpu <= sum(e["dur"] for e in marks) / 1e6 and trace.gpu == 0
    result = summary(data.operators)
    assert (result["cpu_share"], result["gpu_share"], result["top"]["GPU"]) == (100.0, 0.0, [])
    top = {op["name"]: op for op in result["top"]["CPU"]}
    assert len(top) == 10 and {"aten::linear", "aten::addmm"} <= set(top)
    assert top["aten::linear"]["calls"] == top["aten::addmm"]["calls"] == 4  # 2 Linear layers x 2 steps
    assert 0 < top["aten::addmm"]["total_ms"] <= top["aten::linear"]["total_ms"]  # linear includes its addmm
    assert all(0 < op["share"] <= 100 for op in top.values())
    assert [op["total_ms"] for op in result["top"]["CPU"]] == sorted((op["total_ms"] for op in top.values()),
                                                                    reverse=True)


def test_a_gpu_kernel_in_the_trace_counts_as_gpu(real_trace, tmp_path):
    document = json.load(open(glob.glob(f"{real_trace}/framework/pytorch/detailed_profiling/*/*/*.json")[0]))
    cpu = ProfilerReader(real_trace).read().operators[0].cpu
    start = min(e["ts"] for e in document["traceEvents"] if e.get("ph") == "X")
    gpu = [{"ph": "X", "cat": "kernel", "name": "volta_sgemm_32x32", "pid": 0, "tid": 7, "ts": start + 10 * i,
            "dur": 1000.0, "args": {"device": 0, "stream": 7}} for i in range(3)]
    gpu.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
                "ts": start, "dur": 500.0, "args": {}})
    gpu.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": start,
                "dur": 50_000.0, "args": {}})  # a CPU-side runtime call, not an operator
    document["traceEvents"] += gpu
    (tmp_path / TRACE).parent.mkdir(parents=True)
    (tmp_path / TRACE).write_text(json.dumps(document))
    (tmp_path / TRACE).with_name(".algo-1-rank0.tmp.json").write_text("[")  # an export in progress: not read
    [trace] = ProfilerReader(str(tmp_path)).read().operators
    assert trace.gpu == pytest.approx(0.0035) and trace.cpu == pytest.approx(cpu)
    result = summary([trace])
    assert result["gpu_share"] == pytest.approx(100 * 0.0035 / (cpu + 0.0035))
    assert result["cpu_share"] + result["gpu_share"] == pytest.approx(100)
    assert result["top"]["GPU"] == [
        {"name": "volta_sgemm_32x32", "calls": 3, "total_ms": pytest.approx(3.0),
         "share": pytest.approx(100 * 3 / 3.5)},
        {"name": "Memcpy HtoD (Pageable -> Device)", "calls": 1, "total_ms": pytest.approx(0.5),
         "share": pytest.approx(100 * 0.5 / 3.5)}]


def test_rules_read_traces_only_at_the_end_and_an_odd_trace_costs_only_itself(real_trace, tmp_path):
    """Traces can be hundreds of MB on a GPU: the watcher's polls skip them (operators=False). A trace in
    a shape we do not know gives no operators and breaks nothing else."""
    reader = ProfilerReader(real_trace)
    assert reader.read(operators=False).operators == [] and len(reader.read().operators) == 1
    (tmp_path / TRACE).parent.mkdir(parents=True)
    (tmp_path / TRACE).write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x"}]}))  # no ts
    assert ProfilerReader(str(tmp_path)).read().operators == []


def _op(name, ts, dur, tid=1, cat="cpu_op") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 9, "tid": tid, "ts": ts, "dur": dur}


def test_nested_cpu_operators_are_not_counted_twice():
    events = [_op("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              _op("aten::linear", 100, 100), _op("aten::t", 100, 10), _op("aten::addmm", 120, 70),
              _op("aten::copy_", 300, 50), _op("aten::copy_", 310, 20),  # recursion: only the outer one is timed
              _op("autograd::engine::evaluate_function: AddmmBackward0", 150, 40, tid=2),  # another thread
              _op("aten::mm", 400, 0), _op("aten::mm", 400, 0)]  # zero-length operators
    trace = parse_detailed_trace(json.dumps({"traceEvents": events}), f"x/{os.path.basename(TRACE)}")
    assert trace.cpu == pytest.approx((100 + 50 + 40) / 1e6) and trace.gpu == 0
    assert trace.operators[("CPU", "aten::addmm")] == [1, pytest.approx(70e-6)]
    assert trace.operators[("CPU", "aten::copy_")] == [2, pytest.approx(50e-6)]
    assert trace.operators[("CPU", "aten::mm")] == [2, 0.0]
    assert ("CPU", "ProfilerStep#1") not in trace.operators


def test_overall_framework_metrics_gives_the_operator_split_per_node_and_overall(real_trace):
    data = ProfilerReader(real_trace).read()
    data.steps = steps([0.1] * 5)
    finding = evaluate("OverallFrameworkMetrics", data)
    assert not finding.triggered
    for node in ("algo-1", "all"):
        ops = finding.stats[node]["operators"]
        assert (ops["cpu_share"], ops["gpu_share"], ops["traces"]) == (100.0, 0.0, 1)
        assert "aten::linear" in {op["name"] for op in ops["top"]["CPU"]}
    assert "operators (1 detailed trace(s)): CPU 100%, GPU 0% of " in finding.details
    assert "calls)" in finding.details and "aten::" in finding.details


def test_overall_framework_metrics_without_detailed_traces_says_so():
    finding = evaluate("OverallFrameworkMetrics", ProfilerData(steps=steps([0.1] * 5)))
    assert not finding.triggered and finding.details.endswith("; no detailed profiling traces")
    assert finding.stats["algo-1"]["operators"] is None and finding.stats["all"]["operators"] is None
