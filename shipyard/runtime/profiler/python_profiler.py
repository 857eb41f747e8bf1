"""Python profiling over the steps of the PythonProfilingConfig. Each profiled TRAIN step (from its start
to the end of its optimizer step) is split, as SageMaker splits it, at the end of its first TRAIN forward
(phases.Phases reports it): one profile from the step's start to the end of the forward pass, one from
there to the step's end, stored as SageMaker stores them:

    framework/pytorch/<cprofile|pyinstrument>/<node>/
        TRAIN-<step>-stepstart-<start_us>_TRAIN-<step>-forwardpassend-<forward_end_us>/
        TRAIN-<step>-forwardpassend-<forward_end_us>_TRAIN-<step>-stepend-<end_us>/
            python_stats                   (cProfile: a pstats dump)
            python_stats.html, .json       (pyinstrument)

The two are contiguous (the first's end µs is the second's start µs). A step in which no forward was seen
keeps one stepstart -> stepend profile; `end` in place of `stepend` when the script ended before the step
did.

cProfile measures total_time (the wall clock), cpu_time (the process's CPU time) or off_cpu_time (wall
minus CPU: waiting); "default" cycles the three over the profiled steps, as SageMaker's default config
does (both halves of a step with that step's timer). pyinstrument samples the stack every millisecond of
wall-clock time. Only the main thread is profiled. A step's files are written when it ends, between
steps: the split itself only stops one profiler and starts the next."""

from __future__ import annotations

import cProfile
import gc
import os
import time

PYTHON_DIR = "framework/pytorch"
# cProfile's timer for each cProfileTimer (None: cProfile's own wall clock, the cheapest).
TIMERS = {"total_time": None, "cpu_time": time.process_time,
          "off_cpu_time": lambda: time.perf_counter() - time.process_time()}
CYCLE = ("total_time", "cpu_time", "off_cpu_time")
STEP_START, FORWARD_END = "stepstart", "forwardpassend"


class PythonProfiler:
    PER_STEP = True

    def __init__(self, root: str, node: str, config) -> None:
        self.root, self.node, self.config = root, node, config
        self.profiler = None
        self.step, self.phase, self.started = 0, STEP_START, 0.0  # where the current span started
        self.ended: list[tuple] = []  # this step's spans ended, not written yet: (profiler, folder)
        self.profiled = 0  # steps profiled so far (for the default timer's cycle)

    @property
    def timer(self) -> str:
        timer = self.config.cprofile_timer
        return CYCLE[self.profiled % len(CYCLE)] if timer == "default" else timer

    @property
    def profiling(self) -> bool:
        return self.profiler is not None

    def start(self, step: int, now: float) -> None:
        self.step = step
        self._begin(STEP_START, now)

    def forward_ends(self, now: float) -> None:
        """A TRAIN forward of the step ended: at the step's first, its span ends and the next begins."""
        if self.profiling and self.phase == STEP_START:
            self._end(self.step, FORWARD_END, now)
            self._begin(FORWARD_END, now)

    def stop(self, step: int, now: float, phase: str = "stepend") -> list[str]:
        """The step ends (phase "end": the script ended during it): write its spans' stats; their folders."""
        self._end(step, phase, now)
        paths = [self._write(profiler, folder) for profiler, folder in self.ended]
        self.ended = []
        self.profiled += 1
        return paths

    def _begin(self, phase: str, now: float) -> None:
        if self.config.python_profiler == "pyinstrument":
            from pyinstrument import Profiler

            self.profiler = Profiler(interval=0.001)
            self.profiler.start()
        else:
            timer = TIMERS[self.timer]
            self.profiler = cProfile.Profile(timer) if timer is not None else cProfile.Profile()
            self.profiler.enable()
        self.phase, self.started = phase, now

    def _end(self, step: int, phase: str, now: float) -> None:
        if self.config.python_profiler == "pyinstrument":
            self.profiler.stop()
        else:
            self.profiler.disable()
        folder = (f"TRAIN-{self.step}-{self.phase}-{int(self.started * 1e6)}_"
                  f"TRAIN-{step}-{phase}-{int(now * 1e6)}")
        self.ended.append((self.profiler, folder))
        self.profiler = None

    def _write(self, profiler, folder: str) -> str:
        name = self.config.python_profiler
        parent = os.path.join(self.root, PYTHON_DIR, name, self.node)
        tmp = os.path.join(parent, f".{folder}.{os.getpid()}.tmp")  # ranks of a node share the parent
        os.makedirs(tmp, exist_ok=True)
        if name == "pyinstrument":
            from pyinstrument.renderers import JSONRenderer

            with open(os.path.join(tmp, "python_stats.html"), "w") as f:
                f.write(profiler.output_html())
            with open(os.path.join(tmp, "python_stats.json"), "w") as f:
                f.write(profiler.output(JSONRenderer()))
        else:
            # Without the collector: on CPython 3.11 a collection while cProfile builds its stats can
            # visit an entry it has not finished making and crash the process (seen as a segfault in
            # `Garbage-collecting` under snapshot_stats, a few runs in ten).
            collecting = gc.isenabled()
            gc.disable()
            try:
                profiler.dump_stats(os.path.join(tmp, "python_stats"))
            finally:
                if collecting:
                    gc.enable()
        path = os.path.join(parent, folder)
        os.replace(tmp, path)  # written whole, then in place: the sync never uploads half of it
        return path
