"""Detailed profiling: torch.profiler (CPU, and CUDA where there is a GPU) over the steps of the
DetailedProfilingConfig, each step marked "ProfilerStep#<n>" as torch.profiler's own schedule marks it,
exported as one Chrome trace per range and process:

    framework/pytorch/detailed_profiling/<YYYYMMDDHH>/<start_step:09d>/<node>-rank<r>.pt.trace.json

It starts when the range's first step starts (right after the previous optimizer step; step 1 at the
first forward in training mode) and stops when its last optimizer step ends. A range that follows one
that ended in the same optimizer step starts at the next forward instead (see `start`)."""

from __future__ import annotations

import os
import time

from shipyard.contract.profiler import DETAILED_DIR


class DetailedProfiler:
    PER_STEP = False
    # The step at whose end a trace was last stopped, by any DetailedProfiler of this process (an update
    # replaces the profiler, so the next range's is another object).
    stopped_after: int | None = None

    def __init__(self, root: str, node: str, rank: int) -> None:
        self.root, self.node, self.rank = root, node, rank
        self.profile = None
        self.mark = None
        self.first, self.started = 0, 0.0
        self.pending = None  # the hook that starts a deferred trace

    def start(self, step: int, now: float) -> None:
        # torch.profiler must not start while an op recorded under the profiler just stopped is still
        # open: the op's end reaches the new profiler with the old one's context and corrupts the heap
        # (a segfault or "free(): invalid next size" a few steps later, torch 2.13). The optimizer step
        # that stopped the last range is such an op: this range waits for the next forward.
        self.first, self.started = step, now
        if DetailedProfiler.stopped_after == step - 1:
            from torch.nn.modules.module import register_module_forward_pre_hook

            self.pending = register_module_forward_pre_hook(lambda *_: self._begin())
        else:
            self._begin()

    def _begin(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        if self.pending is not None:
            self.pending.remove()
            self.pending = None
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self.profile = profile(activities=activities)
        self.profile.start()
        self._mark(self.first)

    def next_step(self, step: int, now: float) -> None:
        if self.pending is not None:  # no forward in the range's first step
            self._begin()
        self._unmark()
        self._mark(step)

    def _mark(self, step: int) -> None:
        from torch.profiler import record_function

        self.mark = record_function(f"ProfilerStep#{step}")
        self.mark.__enter__()

    def _unmark(self) -> None:
        if self.mark is not None:
            self.mark.__exit__(None, None, None)
            self.mark = None

    def stop(self, step: int, now: float, phase: str = "stepend") -> str | None:
        """Stop and write the trace; its path (None if it never started: no forward in its range)."""
        if self.pending is not None:
            self.pending.remove()
            self.pending = None
            return None
        self._unmark()
        self.profile.stop()
        DetailedProfiler.stopped_after = step
        directory = os.path.join(self.root, DETAILED_DIR, time.strftime("%Y%m%d%H", time.gmtime(self.started)),
                                 f"{self.first:09d}")
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{self.node}-rank{self.rank}.pt.trace.json")
        tmp = os.path.join(directory, f".{self.node}-rank{self.rank}.tmp.json")
        self.profile.export_chrome_trace(tmp)
        os.replace(tmp, path)
        self.profile = None
        return path
