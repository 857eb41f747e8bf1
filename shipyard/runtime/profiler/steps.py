"""Framework metrics of a PyTorch training process, without changes to the script: installed by the
injected sitecustomize only when the job asks for framework metrics. Steps come from the heartbeat's
optimizer-step hooks (one pair per process, shipyard/runtime/heartbeat.py): TRAIN step N spans from the
end of the previous step (of any mode) to the end of optimizer step N, so it includes that step's data
loading, forward and backward; step 1 (whose start is not known) is not recorded. What else is recorded:

- the phases of a step and EVAL steps (shipyard/runtime/profiler/phases.py), over the step timeline's range
  (the module hooks are also on during Python-profiled steps, whose profiles split at a forward's end);
- the DataLoader's events, in the main process and in its workers (shipyard/runtime/profiler/dataloader.py);
- torch.profiler traces (detailed.py) and Python profiles (python_profiler.py) over their options' steps.

When the job's profiling is updated while it runs (control/profiling.py), the agent writes the new
settings to FRAMEWORK_FILE, which the recorder follows from the next step.

Events are written as SageMaker's Chrome trace files (framework/pevents/<YYYYMMDDHH>/
<end_ts_us>_<node>-rank<r>_model_timeline.json), a new file every file_close_interval seconds or
file_max_size bytes and at exit; each is written whole and renamed into place."""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time

from shipyard.contract.profiler import FRAMEWORK_DIR, STEP_PREFIX

# A Chrome trace event is about this many bytes; used to rotate by size without serialising each step.
EVENT_BYTES = 160


class TraceWriter:
    """One process's Chrome trace events: `ts` relative to the process_name event's start time, `pid` the
    rank, and every event's args naming the node and the emitting OS process."""

    def __init__(self, root: str, name: str, profile, node: str, rank: int, tid: int = 0) -> None:
        self.root, self.name, self.node, self.rank, self.tid = root, name, node, rank, tid
        self.close_interval, self.max_size = profile.file_close_interval, profile.file_max_size
        self.os_pid = os.getpid()
        self.start_us = int(time.time() * 1e6)
        self.events: list[dict] = []
        self.opened = time.time()
        self.lock = threading.Lock()

    def add(self, name: str, start: float, end: float, step: int | None = None, **args) -> None:
        if step is not None:
            args["step_num"] = step
        args.update(node=self.node, os_pid=self.os_pid)
        start_us = int(start * 1e6)  # both ends rounded alike: events that end together end at the same µs
        self.events.append({"name": name, "ph": "X", "pid": self.rank, "tid": self.tid,
                            "ts": start_us - self.start_us, "dur": int(end * 1e6) - start_us, "args": args})

    def rotate_if_due(self, now: float) -> None:
        if now - self.opened >= self.close_interval or len(self.events) * EVENT_BYTES >= self.max_size:
            self.write()

    def write(self) -> None:
        with self.lock:
            events, self.events, self.opened = self.events, [], time.time()
            if not events:
                return
            end_us = int(time.time() * 1e6)
            directory = os.path.join(self.root, FRAMEWORK_DIR, time.strftime("%Y%m%d%H", time.gmtime()))
            os.makedirs(directory, exist_ok=True)
            path = os.path.join(directory, f"{end_us}_{self.name}_model_timeline.json")
            meta = {"name": "process_name", "ph": "M", "pid": self.rank,
                    "args": {"name": f"{self.name.replace('-rank', ' rank ')}",
                             "start_time_since_epoch_in_micros": self.start_us}}
            tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp")
            with open(tmp, "w") as f:
                f.write(json.dumps([meta, *events]))  # the C encoder: json.dump's chunked writes are slower
            os.replace(tmp, path)


class RangeRunner:
    """Runs one profiler (detailed.py, python_profiler.py) over the TRAIN steps of its option's range:
    started when the first such step starts, stopped when the last ends (after each step if the profiler
    profiles steps one by one)."""

    def __init__(self, option, profiler) -> None:
        self.option, self.profiler = option, profiler
        self.running = False

    def step_starts(self, step: int, now: float) -> None:
        if not self.option.in_range(step, now):
            return
        if self.running:
            self.profiler.next_step(step, now)
        else:
            self.profiler.start(step, now)
            self.running = True

    def step_ends(self, step: int, now: float) -> None:
        if self.running and (self.profiler.PER_STEP or not self.option.in_range(step + 1, now)):
            self.running = False
            self.profiler.stop(step, now)


# How often a training process looks whether the job's profiling was updated (at a step's end), and the
# file in the instance directory it looks at: the agent writes it then (runtime/profiler/agent.py).
UPDATE_CHECK_SECONDS = 1.0
FRAMEWORK_FILE = "profiler-framework.json"


class StepRecorder:
    def __init__(self, root: str, framework: dict, updates: str | None = None) -> None:
        """updates: FRAMEWORK_FILE's path; what it holds once written is followed from the next step."""
        from shipyard.contract.rank import process_rank
        from shipyard.runtime.profiler.dataloader import DataLoaderProfiler
        from shipyard.runtime.profiler.phases import Phases
        from shipyard.spec.profiler import FrameworkProfile

        self.root, self.profile = root, FrameworkProfile(**framework)
        self.node = os.environ.get("SM_CURRENT_HOST", "algo-1")
        self.rank = (process_rank() or (0, 1))[0]
        self.timeline = TraceWriter(root, f"{self.node}-rank{self.rank}", self.profile, self.node, self.rank)
        self.step_num = 0  # TRAIN steps ended
        self.started = 0  # the TRAIN step that has started (step_num + 1 once it has)
        self.eval_steps = 0
        self.last = 0.0  # where the next step starts (the last step of any mode ended); 0: not known yet
        self.timeline_on = False
        self.phases = Phases(self)
        self.dataloader = DataLoaderProfiler(self)
        self.updates, self.checked = updates, time.time()
        from shipyard.runtime.profiler.memory import ENV_STEP, MemoryProbe

        self.memory = MemoryProbe(self, int(os.environ[ENV_STEP])) if os.environ.get(ENV_STEP) else None
        self.seen = self._mtime()   # a file already there is what `framework` says (a restarted process)
        self._configure(self.profile)
        self._ranges(1, time.time())

    def _configure(self, profile) -> None:
        """The profilers of `profile`'s options (None: framework metrics off)."""
        from shipyard.runtime.profiler.detailed import DetailedProfiler
        from shipyard.runtime.profiler.python_profiler import PythonProfiler

        self.profile = profile
        options = profile.options() if profile is not None else {}
        self.runners = []
        self.python = None  # the Python profiler, told where each step's forward pass ends
        if "detailed" in options:
            self.runners.append(RangeRunner(options["detailed"], DetailedProfiler(self.root, self.node, self.rank)))
        if "python" in options:
            self.python = PythonProfiler(self.root, self.node, options["python"])
            self.runners.append(RangeRunner(options["python"], self.python))
        self.dataloader.set_option(profile.dataloader_profiling_config if profile is not None else None)

    def _mtime(self) -> int:
        try:
            return os.stat(self.updates).st_mtime_ns if self.updates else 0
        except OSError:
            return 0

    def _follow_updates(self, now: float) -> None:
        """Between steps: the job's profiling was updated. What profiles stops at this step's end; the
        new ranges count steps from the start, as SageMaker's do."""
        if now - self.checked < UPDATE_CHECK_SECONDS:
            return
        self.checked = now
        mtime = self._mtime()
        if mtime == self.seen:
            return
        self.seen = mtime
        from shipyard.spec.profiler import FrameworkProfile

        try:
            with open(self.updates) as f:
                framework = json.load(f)
            profile = FrameworkProfile(**framework) if framework is not None else None
        except Exception as exc:   # profiling never stops the script: the settings in force stay
            print(f"shipyard: profiling update not applied: {exc}", file=sys.stderr)
            return
        for runner in self.runners:
            if runner.running:
                runner.running = False
                runner.profiler.stop(self.step_num, now)
        self._configure(profile)

    def _ranges(self, step: int, now: float) -> None:
        """What records during this step: decided once, when it starts (after the runners'), so each hook
        checks one flag."""
        self.timeline_on = self.profile is not None and self.profile.in_range(step, now)
        # Until step 1 starts, the forward hooks are on to see it start (the first forward in training mode);
        # in a Python-profiled step, to see its forward end.
        python_on = self.python is not None and self.python.profiling
        self.phases.set_active(self.timeline_on or self.started < step or python_on)
        self.dataloader.step_starts(step, now)

    def step_starts(self, now: float) -> None:
        """TRAIN step step_num + 1 starts: right after the previous optimizer step, or for step 1 at the
        first forward of a model in training mode."""
        step = self.started = self.step_num + 1
        for runner in self.runners:
            runner.step_starts(step, now)
        if self.memory is not None:
            self.memory.step_starts(step)
        self._ranges(step, now)

    def forward_ends(self, now: float) -> None:
        """A TRAIN forward of a model ended (phases.Phases): SageMaker's forwardpassend."""
        if self.python is not None:
            self.python.forward_ends(now)

    def on_step(self) -> None:
        now = time.time()
        self.step_num += 1
        self.phases.optimizer_done(self.step_num, now)
        if self.last and self.timeline_on:
            self.timeline.add(f"{STEP_PREFIX}TRAIN", self.last, now, self.step_num)
        for runner in self.runners:
            runner.step_ends(self.step_num, now)
        if self.memory is not None:
            self.memory.step_ends(self.step_num)
        self._follow_updates(now)
        self.step_starts(now)
        self.timeline.rotate_if_due(now)
        # The next step starts now: a profiler's start and stop (torch.profiler's first start takes
        # seconds) and the file writes fall between steps, not in one.
        self.last = time.time()

    def eval_step(self, forward_start: float, now: float) -> None:
        """An EVAL step: one forward of a model in eval mode, spanning from the end of the previous step."""
        self.eval_steps += 1
        if self.timeline_on:
            self.timeline.add("Forward", forward_start, now, self.eval_steps, mode="EVAL")
            if self.last:
                self.timeline.add(f"{STEP_PREFIX}EVAL", self.last, now, self.eval_steps)
        self.last = now

    def close(self) -> None:
        """At exit: stop what still profiles (its last span ends in phase "end", in the step that never
        ended) and write the events."""
        now = time.time()
        for runner in self.runners:
            if runner.running:
                runner.running = False
                runner.profiler.stop(self.step_num + 1, now, phase="end")
        self.timeline.write()


def install() -> None:
    from shipyard.runtime import heartbeat
    from shipyard.runtime.import_hooks import after_import

    updates = os.path.join(os.environ["SHIPYARD_INSTANCE_DIR"], FRAMEWORK_FILE)
    recorder = StepRecorder(os.environ["SHIPYARD_PROFILER_DIR"], json.loads(os.environ["SHIPYARD_PROFILER_FRAMEWORK"]),
                            updates)
    heartbeat.add_step_listener(recorder.on_step, before=recorder.phases.before_optimizer)
    after_import("torch.nn.modules.module", recorder.phases.attach)
    after_import("torch.utils.data.dataloader", recorder.dataloader.attach)
    atexit.register(recorder.close)
