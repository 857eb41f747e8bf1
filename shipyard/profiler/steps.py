"""Step times of a PyTorch training process, without changes to the script: installed by the injected
sitecustomize only when the job asks for framework metrics, it listens to the heartbeat's optimizer-step
hook (one hook per process, shipyard/runtime/heartbeat.py). Step N spans from the end of optimizer step
N-1 to the end of step N, so it includes that step's data loading, forward and backward; step 1 (whose
start is not known) is not recorded.

Events are written as SageMaker's Chrome trace files (framework/pevents/<YYYYMMDDHH>/
<end_ts_us>_<node>_model_timeline.json), a new file every file_close_interval seconds or file_max_size
bytes and at exit; each is written whole and renamed into place."""

from __future__ import annotations

import atexit
import json
import os
import threading
import time

from shipyard.profiler.data import FRAMEWORK_DIR

# A Chrome trace event is about this many bytes; used to rotate by size without serialising each step.
EVENT_BYTES = 160


class StepRecorder:
    def __init__(self, root: str, framework: dict) -> None:
        from shipyard.spec.profiler import FrameworkProfile

        self.root, self.profile = root, FrameworkProfile(**framework)
        self.node = os.environ.get("SM_CURRENT_HOST", "algo-1")
        self.rank = int(os.environ.get("RANK", "0"))
        self.start_us = int(time.time() * 1e6)
        self.last = 0.0
        self.step_num = 0
        self.events: list[dict] = []
        self.opened = time.time()
        self.lock = threading.Lock()

    def time_dataloader(self) -> None:
        """Each batch the script waits for (the DataLoader iterator's __next__) becomes a DataLoaderIter
        event of the step it feeds."""
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        original = _BaseDataLoaderIter.__next__

        def timed_next(iterator):
            start = time.time()
            try:
                return original(iterator)
            finally:
                if self.profile.in_range(self.step_num + 1, start):
                    self.events.append({
                        "name": "DataLoaderIter", "ph": "X", "pid": self.rank, "tid": 0,
                        "ts": int(start * 1e6) - self.start_us, "dur": int((time.time() - start) * 1e6),
                        "args": {"step_num": self.step_num + 1, "node": self.node},
                    })

        _BaseDataLoaderIter.__next__ = timed_next

    def on_step(self) -> None:
        now = time.time()
        self.step_num += 1
        # Step 1 has no known start (before it: imports, model building): only later steps are recorded.
        if self.step_num > 1 and self.profile.in_range(self.step_num, now):
            self.events.append({
                "name": "Step:ModeKeys.TRAIN", "ph": "X", "pid": self.rank, "tid": 0,
                "ts": int(self.last * 1e6) - self.start_us, "dur": int((now - self.last) * 1e6),
                "args": {"step_num": self.step_num, "node": self.node},
            })
        self.last = now
        if (now - self.opened >= self.profile.file_close_interval
                or len(self.events) * EVENT_BYTES >= self.profile.file_max_size):
            self.write()

    def write(self) -> None:
        with self.lock:
            events, self.events, self.opened = self.events, [], time.time()
            if not events:
                return
            end_us = int(time.time() * 1e6)
            directory = os.path.join(self.root, FRAMEWORK_DIR, time.strftime("%Y%m%d%H", time.gmtime()))
            os.makedirs(directory, exist_ok=True)
            path = os.path.join(directory, f"{end_us}_{self.node}-rank{self.rank}_model_timeline.json")
            meta = {"name": "process_name", "ph": "M", "pid": self.rank,
                    "args": {"name": f"{self.node} rank {self.rank}", "start_time_since_epoch_in_micros": self.start_us}}
            tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp")
            with open(tmp, "w") as f:
                json.dump([meta, *events], f)
            os.replace(tmp, path)


def install() -> None:
    from shipyard.runtime import heartbeat
    from shipyard.runtime.import_hooks import after_import

    recorder = StepRecorder(os.environ["SHIPYARD_PROFILER_DIR"], json.loads(os.environ["SHIPYARD_PROFILER_FRAMEWORK"]))
    heartbeat.add_step_listener(recorder.on_step)
    after_import("torch.utils.data.dataloader", recorder.time_dataloader)
    atexit.register(recorder.write)
