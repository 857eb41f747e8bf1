"""The detailed torch.profiler traces' operators: a real trace written through detailed.py's own code path
(a tiny model on the CPU) read back by ProfilerReader, a GPU kernel added to it (the GPU side without a
GPU), how nested CPU operators are counted (self time: shares that add up to 100 %), and
OverallFrameworkMetrics' split and top operators."""

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
    assert (result["shares"], result["top"]["GPU"]) == ({"CPU": 100.0, "GPU": 0.0}, [])
    top = {op["name"]: op for op in result["top"]["CPU"]}
    assert len(top) == 10 and "aten::addmm" in top
    assert top["aten::addmm"]["calls"] == 4  # 2 Linear layers x 2 steps
    # Self times: every operator's own, which add up to the top-level operators' time and so to 100 %.
    assert sum(seconds for (device, _), (_, seconds) in trace.operators.items()) == pytest.approx(trace.cpu)
    assert all(0 <= op["share"] <= 100 for op in top.values()) and sum(op["share"] for op in top.values()) <= 100
    assert [op["self_ms"] for op in result["top"]["CPU"]] == sorted((op["self_ms"] for op in top.values()),
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
    assert abs(result["shares"]["GPU"] - 100 * 0.0035 / (cpu + 0.0035)) < 1  # whole %, adding up to 100
    assert sum(result["shares"].values()) == 100
    assert result["top"]["GPU"] == [  # 85.71 % and 14.29 %, rounded so that they add up to 100.0
        {"name": "volta_sgemm_32x32", "calls": 3, "self_ms": pytest.approx(3.0), "share": 85.7},
        {"name": "Memcpy HtoD (Pageable -> Device)", "calls": 1, "self_ms": pytest.approx(0.5), "share": 14.3}]


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
              _op("aten::copy_", 300, 50), _op("aten::copy_", 310, 20),  # recursion: each call its own time
              _op("aten::add_", 500, 50), _op("aten::fill_", 540, 30),  # outlasts its caller: cut at 550
              _op("autograd::engine::evaluate_function: AddmmBackward0", 150, 40, tid=2),  # another thread
              _op("aten::mm", 400, 0), _op("aten::mm", 400, 0)]  # zero-length operators
    trace = parse_detailed_trace(json.dumps({"traceEvents": events}), f"x/{os.path.basename(TRACE)}")
    assert trace.cpu == pytest.approx((100 + 50 + 50 + 40) / 1e6) and trace.gpu == 0
    self_us = {name: (calls, round(seconds * 1e6, 6)) for (_, name), (calls, seconds) in trace.operators.items()}
    assert self_us == {"aten::linear": (1, 20), "aten::t": (1, 10), "aten::addmm": (1, 70), "aten::copy_": (2, 50),
                       "aten::add_": (1, 40), "aten::fill_": (1, 10), "aten::mm": (2, 0),
                       "autograd::engine::evaluate_function: AddmmBackward0": (1, 40)}
    # So the shares of the CPU operator time add up to 100 %, not 100 % for aten::linear plus 70 % for its addmm.
    shares = {op["name"]: op["share"] for op in summary([trace])["top"]["CPU"]}
    assert sum(shares.values()) == pytest.approx(100)
    assert shares["aten::addmm"] == pytest.approx(100 * 70 / 240, abs=0.1)


def test_overall_framework_metrics_gives_the_operator_split_per_node_and_overall(real_trace):
    data = ProfilerReader(real_trace).read()
    data.steps = steps([0.1] * 5)
    finding = evaluate("OverallFrameworkMetrics", data)
    assert not finding.triggered
    for node in ("algo-1", "all"):
        ops = finding.stats[node]["operators"]
        assert (ops["shares"], ops["traces"]) == ({"CPU": 100.0, "GPU": 0.0}, 1)
        assert "aten::addmm" in {op["name"] for op in ops["top"]["CPU"]}
    assert "operators (1 detailed trace(s)): CPU 100%, GPU 0% of " in finding.details
    assert "calls)" in finding.details and "aten::" in finding.details


def test_overall_framework_metrics_without_detailed_traces_says_so():
    finding = evaluate("OverallFrameworkMetrics", ProfilerData(steps=steps([0.1] * 5)))
    assert not finding.triggered and finding.details.endswith("; no detailed profiling traces")
    assert finding.stats["algo-1"]["operators"] is None and finding.stats["all"]["operators"] is None
