"""A heartbeat from every training process, so a hung collective is noticed in minutes and the rank
that hung is named (rather than the hour-long NCCL/gloo timeouts naming nobody).

Each process writes `<SHIPYARD_HEARTBEAT_DIR>/<pid>.json` every few seconds from a daemon thread:

    {"host", "pid", "rank", "local_rank", "progress", "progress_time", "time", "collective", "where"}

`progress_time` is when the process last moved: an optimizer step (a global post-step hook, registered
once torch.optim is imported), its main thread seen somewhere new (so evaluation, data loading and
checkpointing count as moving) or, while its main thread waits for a child process (subprocess,
multiprocessing), the children using CPU (a rank waiting for `tar` or a download tool while the others
wait for it is busy, not hung; a busy helper beside a stuck main thread does not hide the hang);
`steps` counts optimizer steps; `collective` says whether the main thread is inside torch.distributed
or autograd, where a rank waits for the others; `where` is the innermost frame of the script's own
code. When no rank has moved for the job's hang timeout, the ranks that are *not* waiting in a
collective, or that stopped beating, are the ones that hung (control/hangs.py). Only training ranks
(processes with RANK set, as torchrun starts them) beat."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

INTERVAL_SECONDS = float(os.environ.get("SHIPYARD_HEARTBEAT_INTERVAL", "2"))
# CPU seconds the children must use between beats to count as moving (idle helpers use next to none).
CHILD_CPU_SECONDS = 0.05
# Frames from these files mean the process is waiting for the other ranks.
_COLLECTIVE_MARKERS = ("torch/distributed/", "torch/autograd/", "torch/_tensor.py", "torch/nn/parallel/")
_LIBRARY_MARKERS = ("/site-packages/", "/lib/python3", "shipyard/runtime/")
# Frames from these files mean the main thread waits for a child process.
_CHILD_WAIT_MARKERS = ("/subprocess.py", "/multiprocessing/")
# Called after (and before) every optimizer step, through the one global post-step (and pre-step) hook of
# this process: the profiler's step times and phases.
_step_listeners: list = []
_pre_step_listeners: list = []
_hooked = _pre_hooked = False
_hook_lock = threading.Lock()  # the heartbeat's thread and the profiler's may both try


def _on_step(*_args) -> None:
    for listener in _step_listeners:
        listener()


def _before_step(*_args) -> None:
    for listener in _pre_step_listeners:
        listener()


def hook_optimizer() -> bool:
    """Register the global optimizer post-step hook once torch.optim is imported, and the pre-step hook
    when something listens before steps; True once they are."""
    global _hooked, _pre_hooked
    with _hook_lock:
        module = sys.modules.get("torch.optim.optimizer")
        if module is not None and not _hooked:
            module.register_optimizer_step_post_hook(_on_step)
            _hooked = True
        if module is not None and _pre_step_listeners and not _pre_hooked:
            module.register_optimizer_step_pre_hook(_before_step)
            _pre_hooked = True
        return _hooked


def add_step_listener(listener, before=None) -> None:
    """`listener()` runs after every optimizer step, counted from the first (the step numbers are exact);
    `before()`, if given, right before every optimizer step."""
    from shipyard.runtime.import_hooks import after_import

    _step_listeners.append(listener)
    if before is not None:
        _pre_step_listeners.append(before)
    after_import("torch.optim.optimizer", hook_optimizer)


class Heartbeat:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, f"{os.getpid()}.json")
        self.steps = 0
        self.progress_time = time.time()
        self.main = threading.main_thread().ident
        self.last_seen: tuple = ()
        self.children_cpu = 0.0

    def step(self) -> None:
        self.steps += 1
        self.progress_time = time.time()

    def _children_busy(self) -> bool:
        """Whether the child processes used CPU since the last look."""
        import psutil

        used = 0.0
        for child in psutil.Process().children(recursive=True):
            try:
                times = child.cpu_times()
            except psutil.Error:
                continue  # ended meanwhile
            used += times.user + times.system
        busy, self.children_cpu = used > self.children_cpu + CHILD_CPU_SECONDS, used
        return busy

    def _where(self) -> tuple[bool, bool, str]:
        """(in a collective, waiting for a child process, the script's innermost frame)"""
        frame = sys._current_frames().get(self.main)
        collective, child, where = False, False, ""
        seen = (frame.f_code, frame.f_lineno, self.steps) if frame is not None else ()
        if seen != self.last_seen:
            self.last_seen, self.progress_time = seen, time.time()
        while frame is not None:
            filename = frame.f_code.co_filename.replace(os.sep, "/")
            if any(marker in filename for marker in _COLLECTIVE_MARKERS):
                collective = True
            if any(marker in filename for marker in _CHILD_WAIT_MARKERS):
                child = True
            if not where and not any(marker in filename for marker in _LIBRARY_MARKERS):
                where = f"{os.path.basename(filename)}:{frame.f_lineno} in {frame.f_code.co_name}"
            frame = frame.f_back
        return collective, child, where

    def beat(self) -> None:
        hook_optimizer()
        collective, child, where = self._where()
        # Only while the main thread stands still: listing children reads all of /proc, which a training
        # loop that moves need not pay for.
        if child and time.time() - self.progress_time > INTERVAL_SECONDS / 2 and self._children_busy():
            self.progress_time = time.time()
        record = {
            "host": os.environ.get("SM_CURRENT_HOST", ""), "pid": os.getpid(),
            "rank": int(os.environ.get("RANK", "-1")), "local_rank": int(os.environ.get("LOCAL_RANK", "-1")),
            "steps": self.steps, "progress_time": self.progress_time,
            "time": time.time(), "collective": collective, "where": where,
        }
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump(record, f)
        os.replace(tmp, self.path)

    def run(self) -> None:
        while True:
            try:
                self.beat()
            except Exception:
                pass  # never disturb training; a missing heartbeat is itself a signal
            time.sleep(INTERVAL_SECONDS)


def install() -> None:
    directory = os.environ["SHIPYARD_HEARTBEAT_DIR"]
    # Only the training ranks: torchrun's own agent process has no RANK.
    if "RANK" not in os.environ:
        return
    os.makedirs(directory, exist_ok=True)
    beat = Heartbeat(directory)
    add_step_listener(beat.step)   # hooked as torch.optim is imported: every step counted, the first too
    threading.Thread(target=beat.run, name="shipyard-heartbeat", daemon=True).start()


def read_all(directory: str) -> list[dict]:
    beats = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if name.endswith(".json"):
            try:
                with open(os.path.join(directory, name)) as f:
                    beats.append(json.load(f))
            except (OSError, ValueError):
                continue
    return beats
