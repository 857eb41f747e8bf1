"""Framework profiling end to end, through the SDK (contract 3): a 1-instance job whose script knows
nothing of profiling, with all three options of FrameworkProfile on a DataLoader with 2 workers, leaves
under <output>/<job>/profiler-output/ the step phases, the dataloader's events from the main process
and from both workers, a torch.profiler trace of exactly the detailed steps, and two pstats dumps per
Python-profiled step, split at the end of its forward pass."""

from __future__ import annotations

import glob
import json
import textwrap

import pytest

from shipyard.profiler import (
    DataloaderProfilingConfig,
    DetailedProfilingConfig,
    FrameworkProfile,
    ProfilerConfig,
    PythonProfilingConfig,
)
from shipyard.pytorch import PyTorch
from shipyard.rules.profiler.data import ProfilerReader
from tests.profiler.test_framework_events import assert_split_at_forward_end, python_spans
from tests.profiler.test_rules import evaluate

pytestmark = pytest.mark.slow

SCRIPT = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    if __name__ == "__main__":
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        data = DataLoader(TensorDataset(torch.randn(12 * 8, 4)), batch_size=8, num_workers=2)
        for (x,) in data:
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            model(torch.randn(8, 4))
"""


def test_all_three_options_on_a_two_worker_dataloader(home, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent(SCRIPT))
    profile = FrameworkProfile(detailed_profiling_config=DetailedProfilingConfig(start_step=4, num_steps=2),
                               dataloader_profiling_config=DataloaderProfilingConfig(start_step=1, num_steps=20),
                               python_profiling_config=PythonProfilingConfig(start_step=6, num_steps=2))
    est = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=1, framework_version="2.1",
                  py_version="py3", output_path=str(tmp_path / "out"),
                  profiler_config=ProfilerConfig(framework_profile_params=profile))
    est.fit(logs=False)
    job = est.latest_training_job
    assert job.describe()["TrainingJobStatus"] == "Completed"
    params = job.describe()["ProfilerConfig"]["ProfilingParameters"]
    assert json.loads(params["PythonProfilingConfig"]) == {"StartStep": 6, "NumSteps": 2, "ProfilerName": "cprofile",
                                                           "cProfileTimer": "total_time"}
    root = tmp_path / "out" / job.name / "profiler-output"

    events = [e for path in glob.glob(f"{root}/framework/pevents/*/*_model_timeline.json")
              for e in json.load(open(path)) if e["ph"] == "X"]
    main = {e["args"]["os_pid"] for e in events if e["name"] == "Forward"}
    assert len(main) == 1  # the training process
    names = {e["name"] for e in events}
    assert names >= {"Step:ModeKeys.TRAIN", "Step:ModeKeys.EVAL", "Forward", "Backward(post-forward)", "Optimizer",
                     "DataLoaderIterInitialize", "DataLoaderIter", "DataLoaderWorker"}
    for step in range(2, 13):
        assert {e["name"] for e in events if e["args"].get("step_num") == step and e["args"]["os_pid"] in main} >= \
            {"Step:ModeKeys.TRAIN", "Forward", "Backward(post-forward)", "Optimizer", "DataLoaderIter"}, step
    [init] = [e for e in events if e["name"] == "DataLoaderIterInitialize"]
    assert (init["args"]["num_workers"], init["args"]["pin_memory"]) == (2, False)
    workers = [e for e in events if e["name"] == "DataLoaderWorker"]
    assert len(workers) == 12
    assert {e["args"]["worker_pid"] for e in workers} == {e["args"]["os_pid"] for e in workers}
    assert len({e["args"]["worker_pid"] for e in workers} - main) == 2

    [trace] = glob.glob(f"{root}/framework/pytorch/detailed_profiling/*/000000004/algo-1-rank0.pt.trace.json")
    marks = sorted(e["name"] for e in json.load(open(trace))["traceEvents"] if e["name"].startswith("ProfilerStep#"))
    assert marks == ["ProfilerStep#4", "ProfilerStep#5"]
    # OverallFrameworkMetrics reads the trace's operators: all on the CPU, both Linear layers in both steps.
    data = ProfilerReader(str(root)).read()
    finding = evaluate("OverallFrameworkMetrics", data)
    assert "operators (1 detailed trace(s)): CPU 100%, GPU 0%" in finding.details and "calls)" in finding.details
    assert len(finding.stats["algo-1"]["operators"]["top"]["CPU"]) == 10
    [operators] = data.operators
    calls, seconds = operators.operators["CPU", "aten::linear"]
    assert calls == 4 and seconds > 0

    spans = python_spans(root)
    assert sorted(spans) == [6, 7]
    for step in spans.values():
        assert_split_at_forward_end(step)
