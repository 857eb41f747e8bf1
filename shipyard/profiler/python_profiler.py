"""Python profiling over the steps of the PythonProfilingConfig, one profile per TRAIN step (from its
start to the end of its optimizer step), as SageMaker stores them:

    framework/pytorch/<cprofile|pyinstrument>/<node>/<startmode>-<startstep>-stepstart-<start_us>_
        <endmode>-<endstep>-stepend-<end_us>/python_stats            (cProfile: a pstats dump)
                                             python_stats.html, .json (pyinstrument)

(`end` in place of `stepend` when the script ended before the step did.)

cProfile measures total_time (the wall clock), cpu_time (the process's CPU time) or off_cpu_time (wall
minus CPU: waiting); "default" cycles the three over the profiled steps, as SageMaker's default config
does. pyinstrument samples the stack every millisecond of wall-clock time. Only the main thread is
profiled."""

from __future__ import annotations

import cProfile
import os
import time

PYTHON_DIR = "framework/pytorch"
# cProfile's timer for each cProfileTimer (None: cProfile's own wall clock, the cheapest).
TIMERS = {"total_time": None, "cpu_time": time.process_time,
          "off_cpu_time": lambda: time.perf_counter() - time.process_time()}
CYCLE = ("total_time", "cpu_time", "off_cpu_time")


class PythonProfiler:
    PER_STEP = True

    def __init__(self, root: str, node: str, config) -> None:
        self.root, self.node, self.config = root, node, config
        self.profiler = None
        self.step, self.started = 0, 0.0
        self.profiled = 0  # steps profiled so far (for the default timer's cycle)

    @property
    def timer(self) -> str:
        timer = self.config.cprofile_timer
        return CYCLE[self.profiled % len(CYCLE)] if timer == "default" else timer

    def start(self, step: int, now: float) -> None:
        if self.config.python_profiler == "pyinstrument":
            from pyinstrument import Profiler

            self.profiler = Profiler(interval=0.001)
            self.profiler.start()
        else:
            timer = TIMERS[self.timer]
            self.profiler = cProfile.Profile(timer) if timer is not None else cProfile.Profile()
            self.profiler.enable()
        self.step, self.started = step, now

    def stop(self, step: int, now: float, phase: str = "stepend") -> str:
        """Stop and write this step's stats (phase "end": the script ended during the step); their folder."""
        name = self.config.python_profiler
        folder = (f"TRAIN-{self.step}-stepstart-{int(self.started * 1e6)}_"
                  f"TRAIN-{step}-{phase}-{int(now * 1e6)}")
        parent = os.path.join(self.root, PYTHON_DIR, name, self.node)
        tmp = os.path.join(parent, f".{folder}.{os.getpid()}.tmp")  # ranks of a node share the parent
        os.makedirs(tmp, exist_ok=True)
        if name == "pyinstrument":
            from pyinstrument.renderers import JSONRenderer

            self.profiler.stop()
            with open(os.path.join(tmp, "python_stats.html"), "w") as f:
                f.write(self.profiler.output_html())
            with open(os.path.join(tmp, "python_stats.json"), "w") as f:
                f.write(self.profiler.output(JSONRenderer()))
        else:
            self.profiler.disable()
            self.profiler.dump_stats(os.path.join(tmp, "python_stats"))
        self.profiler = None
        self.profiled += 1
        path = os.path.join(parent, folder)
        os.replace(tmp, path)  # written whole, then in place: the sync never uploads half of it
        return path
