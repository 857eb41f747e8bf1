"""The framework recorder inside a training process (contract 3), in this process on a tiny model: the
phases of each step nest inside it and add up, EVAL steps, the DataLoader's events (workers included),
the module hooks off out of range, torch.profiler traces for exactly the configured steps, and Python
profiles split at the end of each step's forward pass, that pstats / pyinstrument's output can be read
from."""

from __future__ import annotations

import glob
import json
import os
import pstats
import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.nn.modules import module as torch_module
from torch.utils.data import DataLoader, TensorDataset

from shipyard.rules.profiler.data import ProfilerReader
from shipyard.runtime import heartbeat
from shipyard.runtime.profiler.steps import StepRecorder

PHASES = ("Forward", "Backward(post-forward)", "Optimizer")
US = 1e-6  # event times are whole microseconds


@pytest.fixture
def recorder(tmp_path, monkeypatch):
    """`recorder(**framework)`: a StepRecorder attached to this process's torch as install() attaches it
    (the heartbeat's optimizer hooks, the global module hooks, the DataLoader), detached afterwards."""
    monkeypatch.setenv("SM_CURRENT_HOST", "algo-1")
    monkeypatch.setenv("RANK", "0")
    made = []

    def make(updates: str | None = None, **framework) -> StepRecorder:
        r = StepRecorder(str(tmp_path), framework, updates)
        heartbeat.add_step_listener(r.on_step, before=r.phases.before_optimizer)
        r.phases.attach()
        r.dataloader.attach()
        made.append(r)
        return r

    yield make
    for r in made:
        heartbeat._step_listeners.remove(r.on_step)
        heartbeat._pre_step_listeners.remove(r.phases.before_optimizer)
        r.phases.detach()
        r.dataloader.detach()


def _train(steps: int, eval_batches: int = 0, num_workers: int = 0, teacher: nn.Module | None = None) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    loss_fn = nn.MSELoss()  # a root module too, but no model: no Forward, no step of its own
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = DataLoader(TensorDataset(torch.randn(8 * steps, 4)), batch_size=8, num_workers=num_workers)
    for (x,) in data:
        out = model(x)
        if teacher is not None:
            with torch.no_grad():
                target = teacher(x)
            out = out - target
        loss = loss_fn(out, torch.zeros_like(out))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        for i, (x,) in enumerate(DataLoader(TensorDataset(torch.randn(8 * eval_batches, 4)), batch_size=8)):
            loss_fn(model(x), torch.zeros(len(x), 1))


def _raw_events(root) -> list[dict]:
    return [e for path in glob.glob(f"{root}/framework/pevents/*/*_model_timeline.json")
            for e in json.load(open(path)) if e["ph"] == "X"]


def test_phases_nest_in_each_step_and_add_up(recorder, tmp_path):
    r = recorder()
    _train(steps=6, eval_batches=2)
    r.close()
    data = ProfilerReader(str(tmp_path)).read()
    train = {s.step: s for s in data.steps if s.mode == "TRAIN"}
    assert sorted(train) == [2, 3, 4, 5, 6]  # step 1's start is not known
    for number, step in train.items():
        phases = {e.name: e for e in data.events
                  if e.step == number and e.name in PHASES and e.args.get("mode", "TRAIN") == "TRAIN"}
        assert set(phases) == set(PHASES), number
        forward, backward, optimizer = (phases[n] for n in PHASES)
        assert step.start - US <= forward.start and optimizer.start + optimizer.duration <= step.start + step.duration + US
        assert forward.start + forward.duration <= backward.start + US  # in order, no overlap
        assert backward.start + backward.duration <= optimizer.start + US
        assert forward.duration + backward.duration + optimizer.duration <= step.duration + 3 * US
        assert 0 < step.dataloader < step.duration  # its DataLoaderIter (the reader adds it up)
    evals = sorted(s.step for s in data.steps if s.mode == "EVAL")
    assert evals == [1, 2]
    eval_forwards = [e for e in data.events if e.name == "Forward" and e.args.get("mode") == "EVAL"]
    assert [e.step for e in eval_forwards] == [1, 2]
    train_forwards = [e.step for e in data.events if e.name == "Forward" and e.args.get("mode") == "TRAIN"]
    assert train_forwards == list(range(1, 7))  # one per step: the loss module's calls are none
    loads = [e for e in data.events if e.name == "DataLoaderIter"]
    assert [(e.args["mode"], e.step) for e in loads] == [("TRAIN", n) for n in range(1, 7)] + [("EVAL", 1), ("EVAL", 2)]
    # each step's wait is its own mode's: EVAL step 2's batch is not added to TRAIN step 2
    for step in data.steps:
        mine = [e.duration for e in loads if e.step == step.step and e.args["mode"] == step.mode]
        assert step.dataloader == pytest.approx(sum(mine)), step
    [init, eval_init] = [e for e in data.events if e.name == "DataLoaderIterInitialize"]
    assert (init.args["num_workers"], init.args["pin_memory"], init.step) == (0, False, 1)
    assert all(e["args"]["os_pid"] == os.getpid() and e["args"]["node"] == "algo-1" and e["pid"] == 0
               for e in _raw_events(tmp_path))


def test_a_teacher_in_eval_mode_is_part_of_the_training_step(recorder, tmp_path):
    r = recorder()
    teacher = nn.Linear(4, 1).eval()
    _train(steps=3, teacher=teacher)
    r.close()
    data = ProfilerReader(str(tmp_path)).read()
    assert {s.mode for s in data.steps} == {"TRAIN"}
    assert [e.step for e in data.events if e.name == "Forward"] == [1, 1, 2, 2, 3, 3]


def test_out_of_range_the_module_hooks_are_off(recorder, tmp_path):
    before = (set(torch_module._global_forward_pre_hooks), set(torch_module._global_forward_hooks))
    r = recorder(start_step=3, num_steps=2,
                 python_profiling_config={"start_step": 100})  # only the timeline's range matters here
    _train(steps=7)
    assert r.phases.handles is None
    assert (set(torch_module._global_forward_pre_hooks), set(torch_module._global_forward_hooks)) == before
    r.close()
    data = ProfilerReader(str(tmp_path)).read()
    assert sorted(s.step for s in data.steps) == [3, 4]
    assert sorted({e.step for e in data.events if e.name in PHASES}) == [3, 4]
    assert sorted(e.step for e in data.events if e.name == "DataLoaderIter") == [3, 4]


def test_dataloader_workers_record_their_fetches(recorder, tmp_path):
    r = recorder(dataloader_profiling_config={"start_step": 1, "num_steps": 100})
    _train(steps=6, num_workers=2)
    r.close()
    data = ProfilerReader(str(tmp_path)).read()
    workers = [e for e in data.events if e.name == "DataLoaderWorker"]
    assert len(workers) == 6  # one per batch, fetched inside the workers
    pids = {e.os_pid for e in workers}
    assert len(pids) == 2 and os.getpid() not in pids
    assert all(e.args["worker_pid"] == e.args["os_pid"] == e.os_pid and e.pid == 0 for e in workers)
    init = [e for e in data.events if e.name == "DataLoaderIterInitialize"][0]  # then the evaluation's
    assert init.args["num_workers"] == 2 and init.os_pid == os.getpid()
    # Only the given options run: no torch.profiler trace, no Python profile.
    assert not glob.glob(f"{tmp_path}/framework/pytorch/*")


def test_detailed_trace_holds_exactly_the_configured_steps(recorder, tmp_path):
    r = recorder(detailed_profiling_config={"start_step": 3, "num_steps": 2})
    _train(steps=6)
    r.close()
    [path] = glob.glob(f"{tmp_path}/framework/pytorch/detailed_profiling/*/000000003/algo-1-rank0.pt.trace.json")
    trace = json.load(open(path))["traceEvents"]
    marks = {e["name"]: e for e in trace if e.get("name", "").startswith("ProfilerStep#")}
    assert sorted(marks) == ["ProfilerStep#3", "ProfilerStep#4"]
    linear = [e for e in trace if e.get("name") == "aten::addmm"]
    assert len(linear) == 2 * 2  # two Linear forwards in each of the two steps
    for step in marks.values():
        inside = [e for e in linear if step["ts"] <= e["ts"] <= step["ts"] + step["dur"]]
        assert len(inside) == 2


def python_spans(root, profiler: str = "cprofile") -> dict[int, list[tuple]]:
    """The Python profiles under `root`, per step: (start phase, start us, end phase, end us, folder), in
    time order, parsed from SageMaker's folder names
    <mode>-<step>-<phase>-<us>_<mode>-<step>-<phase>-<us>."""
    spans: dict[int, list[tuple]] = {}
    for folder in glob.glob(f"{root}/framework/pytorch/{profiler}/algo-1/*"):
        begin, end = os.path.basename(folder).split("_")
        (mode, step, phase, us), (end_mode, end_step, end_phase, end_us) = begin.split("-"), end.split("-")
        assert mode == end_mode == "TRAIN" and step == end_step, folder
        spans.setdefault(int(step), []).append((phase, int(us), end_phase, int(end_us), folder))
    return {step: sorted(found, key=lambda span: span[1]) for step, found in sorted(spans.items())}


def ran(folder: str, file: str, function: str) -> bool:
    """Whether cProfile's stats in `folder` hold a call of `function` defined in a file ending in `file`."""
    return any(path.endswith(file) and name == function for (path, _, name) in pstats.Stats(f"{folder}/python_stats").stats)


LINEAR, SGD, BACKWARD = ("torch/nn/modules/linear.py", "forward"), ("torch/optim/sgd.py", "step"), ("torch/_tensor.py", "backward")


def assert_split_at_forward_end(spans: list[tuple], last: str = "stepend") -> None:
    """A step's two profiles: step start to forward end (the model's forward inside), then on without a
    gap to the step's end (the backward and the optimizer's step inside)."""
    assert [(start, end) for start, _, end, _, _ in spans] == [("stepstart", "forwardpassend"), ("forwardpassend", last)]
    (_, first_start, _, first_end, forward), (_, second_start, _, second_end, rest) = spans
    assert first_start <= first_end == second_start <= second_end
    assert ran(forward, *LINEAR) and not ran(forward, *SGD) and not ran(forward, *BACKWARD)
    if last == "stepend":
        assert ran(rest, *SGD) and ran(rest, *BACKWARD) and not ran(rest, *LINEAR)


def test_cprofile_splits_each_step_at_the_end_of_its_forward(recorder, tmp_path):
    r = recorder(python_profiling_config={"start_step": 2, "num_steps": 2, "cprofile_timer": "cpu_time"})
    _train(steps=5)
    r.close()
    spans = python_spans(tmp_path)
    assert sorted(spans) == [2, 3]
    for step in spans.values():
        assert_split_at_forward_end(step)
    assert spans[2][-1][3] <= spans[3][0][1]  # step 3 starts where step 2 ended (the writes fall between)


def test_python_profiles_split_with_the_timeline_off(recorder, tmp_path):
    """The timeline's range (step 100) is off; the Python profiler's (steps 3 to 5) turns the module hooks
    on for its own steps only. Step 3 has no forward: one profile; the script ends in step 5, after its
    forward: its second profile ends in phase `end`."""
    r = recorder(start_step=100, python_profiling_config={"start_step": 3, "num_steps": 3})
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    hooks_on = []
    for i in range(5):  # steps 1 to 5; step 1 starts at the first forward
        hooks_on.append(r.phases.handles is not None)
        if i != 2:
            model(torch.randn(8, 4)).pow(2).mean().backward()
        if i != 4:
            optimizer.step()
    r.close()
    assert hooks_on == [True, False, True, True, True]  # on before step 1 to see it start
    spans = python_spans(tmp_path)
    assert sorted(spans) == [3, 4, 5]
    assert [(start, end) for start, _, end, _, _ in spans[3]] == [("stepstart", "stepend")]
    assert_split_at_forward_end(spans[4])
    assert_split_at_forward_end(spans[5], last="end")
    assert not glob.glob(f"{tmp_path}/framework/pevents/*/*")  # the timeline recorded nothing


def test_pyinstrument_writes_html_and_json(recorder, tmp_path):
    r = recorder(python_profiling_config={"start_step": 2, "python_profiler": "pyinstrument"})
    _train(steps=4)
    r.close()
    spans = python_spans(tmp_path, "pyinstrument")
    assert [(start, end) for start, _, end, _, _ in spans[2]] == [("stepstart", "forwardpassend"), ("forwardpassend", "stepend")]
    for *_, folder in spans[2]:
        assert "<html" in open(os.path.join(folder, "python_stats.html")).read().lower()
        assert "root_frame" in json.load(open(os.path.join(folder, "python_stats.json")))


def test_default_options_cycle_the_cprofile_timer_over_steps_9_to_11(recorder, tmp_path):
    r = recorder()
    timers = []
    original = r.python._begin
    r.python._begin = lambda phase, now: (timers.append((r.python.step, phase, r.python.timer)), original(phase, now))
    _train(steps=12)
    r.close()
    assert timers == [(step, phase, timer) for step, timer in ((9, "total_time"), (10, "cpu_time"), (11, "off_cpu_time"))
                      for phase in ("stepstart", "forwardpassend")]  # both halves of a step with its timer
    assert sorted(python_spans(tmp_path)) == [9, 10, 11]
    assert len(glob.glob(f"{tmp_path}/framework/pytorch/cprofile/algo-1/TRAIN-*")) == 6
    assert glob.glob(f"{tmp_path}/framework/pytorch/detailed_profiling/*/000000005/*.pt.trace.json")


def test_a_running_process_follows_updated_settings_from_its_next_step(recorder, tmp_path, monkeypatch):
    """update_profiler() on a running job: the agent writes the new framework settings (null: off) to the
    file the recorder looks at between steps; what profiled under the old settings stops there."""
    from shipyard.runtime.profiler import steps

    monkeypatch.setattr(steps, "UPDATE_CHECK_SECONDS", 0.0)
    updates = tmp_path / "profiler-framework.json"
    r = recorder(str(updates), start_step=2, num_steps=2,
                 detailed_profiling_config={"start_step": 3, "num_steps": 100})
    _train(4)                      # steps 1-4: timeline 2-3, torch.profiler from step 3 on
    assert r.runners[0].running
    updates.write_text(json.dumps({"start_step": 6, "num_steps": 2}))
    _train(4)                      # read when step 5 ends: timeline 6-7, every option at 6-7
    assert r.profile.start_step == 6 and [runner.option.start_step for runner in r.runners] == [6, 6]
    updates.write_text("null")
    _train(3)                      # read when step 9 ends: nothing more
    assert r.profile is None and r.runners == [] and not r.timeline_on
    r.close()
    assert [s.step for s in ProfilerReader(str(tmp_path)).read().step_durations("algo-1")] == [2, 3, 6, 7]
    # torch.profiler's first trace ended with the update (steps 3-5); the second covers 6-7.
    traces = glob.glob(f"{tmp_path}/framework/pytorch/detailed_profiling/*/*/algo-1-rank0.pt.trace.json")
    assert sorted(path.split("/")[-2] for path in traces) == ["000000003", "000000006"]
    profiled = glob.glob(f"{tmp_path}/framework/pytorch/cprofile/algo-1/TRAIN-*")
    assert sorted({os.path.basename(p).split("-")[1] for p in profiled}) == ["6", "7"]


BACK_TO_BACK = """
import json, sys, traceback
import torch
from torch import nn
from shipyard.runtime import heartbeat
from shipyard.runtime.profiler import steps
from shipyard.runtime.profiler.detailed import DetailedProfiler

steps.UPDATE_CHECK_SECONDS = 0.0
root, updates = sys.argv[1], sys.argv[2]
recorder = steps.StepRecorder(root, {"detailed_profiling_config": {"start_step": 1, "num_steps": 1}}, updates)
heartbeat.add_step_listener(recorder.on_step, before=recorder.phases.before_optimizer)
recorder.phases.attach()
begun = []
original = DetailedProfiler._begin
in_optimizer_step = lambda: any(frame.name == "on_step" for frame in traceback.extract_stack())
DetailedProfiler._begin = lambda self: begun.append((self.first, in_optimizer_step())) or original(self)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 9):   # read when this step ends: the next step alone is traced
    with open(updates, "w") as f:
        json.dump({"detailed_profiling_config": {"start_step": step + 1, "num_steps": 1}}, f)
    loss = model(torch.randn(8, 4)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
recorder.close()
print(json.dumps(begun))
"""


def test_a_trace_right_after_another_starts_at_the_next_forward_not_in_the_optimizer_step(tmp_path):
    """torch.profiler started in the optimizer step that stopped the previous trace corrupts the heap (a
    segfault within a few such restarts): an update that makes ranges follow each other, step after step,
    must start each trace at its step's forward and leave the process whole."""
    done = subprocess.run([sys.executable, "-X", "faulthandler", "-c", BACK_TO_BACK, str(tmp_path),
                           str(tmp_path / "profiler-framework.json")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "KINETO_LOG_LEVEL": "6"})
    assert done.returncode == 0, done.stderr[-3000:]
    begun = json.loads(done.stdout.splitlines()[-1])
    # each trace began at its step's first forward, outside the optimizer step (step 9 never ran)
    assert begun == [[step, False] for step in range(1, 9)]
    traces = glob.glob(f"{tmp_path}/framework/pytorch/detailed_profiling/*/*/algo-1-rank0.pt.trace.json")
    assert sorted(int(path.split("/")[-2]) for path in traces) == list(range(1, 9))
    for path in traces:
        step = int(path.split("/")[-2])
        names = {e.get("name") for e in json.load(open(path))["traceEvents"]}
        assert f"ProfilerStep#{step}" in names and "aten::linear" in names, (step, sorted(names)[:20])


def test_the_memory_probe_counts_the_model_and_one_step_s_activations(recorder, tmp_path, monkeypatch):
    """For `shipyard plan --calibrate`: the parameters of the model trained, and the bytes autograd saved
    for backward in step 3, each storage once and the weights not."""
    monkeypatch.setenv("SHIPYARD_PROFILER_MEMORY_STEP", "3")
    recorder(start_step=1, num_steps=1)
    _train(5)
    [path] = glob.glob(f"{tmp_path}/framework/memory/algo-1-rank0.json")
    measured = json.load(open(path))
    assert measured["step"] == 3 and measured["parameters"] == (4 * 8 + 8) + (8 * 1 + 1)
    # a batch of 8: Linear(4, 8)'s input (8 x 4 floats), ReLU's output (8 x 8, Linear(8, 1)'s input too),
    # and MSELoss's input and target (8 x 1 each): 4 bytes each
    assert measured["activation_bytes"] == 4 * (8 * 4 + 8 * 8 + 8 * 1 + 8 * 1)
