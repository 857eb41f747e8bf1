"""The DataLoader's events, as SageMaker's PyTorch names them, patched into torch.utils.data right after
the script imports it (profiled jobs only):

- "DataLoaderIterInitialize": making an iterator (`iter(loader)`, which starts the worker processes),
  args num_workers and pin_memory;
- "DataLoaderIter": each batch the script waits for (the iterator's __next__), with the step it feeds
  (an EVAL step's after model.eval(): args.mode);
- "DataLoaderWorker": each batch fetched inside a worker process (num_workers > 0), args.worker_pid
  that process, written by the worker itself to its own trace file.

They record over the DataloaderProfilingConfig's steps when one is given (only the events whose name
matches its metrics_regex), else along with the step timeline: one event per batch is cheap, and the
Dataloader rule needs them over many seconds. Workers learn whether to record, and the step, from a
shared page the main process updates as steps start (workers are forked from it; Linux's default).
A worker's step_num is the main process's step when it fetched: workers fetch ahead (prefetch_factor
batches each), so it is the step being trained, not the one the batch will feed."""

from __future__ import annotations

import functools
import mmap
import os
import re
import struct
import sys
import time

from shipyard.contract.profiler import DATALOADER_INIT, DATALOADER_ITER, DATALOADER_WORKER

_SHARED = struct.Struct("<qq")  # (recording, step)


class DataLoaderProfiler:
    def __init__(self, recorder, option=None) -> None:
        self.r = recorder
        self.set_option(option)
        self.on = False
        self.shared = mmap.mmap(-1, _SHARED.size)  # anonymous and shared: forked workers see the updates
        self.originals: list[tuple[object, str, object]] = []
        self.worker = None  # this process's TraceWriter, in a worker process

    def set_option(self, option) -> None:
        """The DataloaderProfilingConfig (None: over the step timeline's range), also when it is updated."""
        self.option = option
        regex = re.compile(option.metrics_regex if option is not None else ".*")
        self.names = {n for n in (DATALOADER_INIT, DATALOADER_ITER, DATALOADER_WORKER) if regex.search(n)}

    def step_starts(self, step: int, now: float) -> None:
        self.on = self.option.in_range(step, now) if self.option is not None else self.r.timeline_on
        _SHARED.pack_into(self.shared, 0, self.on, step)

    def _patch(self, owner, name: str, make) -> None:
        original = getattr(owner, name)
        self.originals.append((owner, name, original))
        setattr(owner, name, functools.wraps(original)(make(original)))

    def attach(self) -> None:
        """torch.utils.data is imported (called by the import hook)."""
        from torch.utils.data import _utils
        from torch.utils.data.dataloader import DataLoader, _BaseDataLoaderIter

        if DATALOADER_INIT in self.names:
            self._patch(DataLoader, "_get_iterator", self._timed_init)
        if DATALOADER_ITER in self.names:
            self._patch(_BaseDataLoaderIter, "__next__", self._timed_next)
        if DATALOADER_WORKER in self.names:
            self._patch(_utils.worker, "_worker_loop", self._worker_loop)

    def detach(self) -> None:
        for owner, name, original in reversed(self.originals):
            setattr(owner, name, original)
        self.originals = []

    # -- the main process ---------------------------------------------------------------------------
    def _timed_init(self, original):
        def get_iterator(loader):
            if not self.on:
                return original(loader)
            start = time.time()
            try:
                return original(loader)
            finally:
                self.r.timeline.add(DATALOADER_INIT, start, time.time(), self.r.step_num + 1,
                                    num_workers=loader.num_workers, pin_memory=loader.pin_memory)

        return get_iterator

    def _timed_next(self, original):
        def next_batch(iterator):
            if not self.on:
                return original(iterator)
            start = time.time()
            batch = original(iterator)  # the end of the data (StopIteration) is no batch: not recorded
            mode = self.r.phases.mode()
            step = self.r.eval_steps + 1 if mode == "EVAL" else self.r.step_num + 1
            self.r.timeline.add(DATALOADER_ITER, start, time.time(), step, mode=mode)
            return batch

        return next_batch

    # -- a worker process ---------------------------------------------------------------------------
    def _worker_loop(self, original):
        def worker_loop(*args, **kwargs):
            self._in_worker()
            try:
                return original(*args, **kwargs)
            finally:
                self.worker.write()  # the worker ends with os._exit: no atexit

        return worker_loop

    def _in_worker(self) -> None:
        from torch.utils.data._utils import fetch

        from shipyard.runtime.profiler.steps import TraceWriter

        # A Python profile running in the main thread when the worker was forked would go on here, unread.
        sys.setprofile(None)
        pid = os.getpid()
        self.worker = writer = TraceWriter(self.r.root, f"{self.r.node}-rank{self.r.rank}-worker{pid}",
                                           self.r.profile, self.r.node, self.r.rank, tid=pid)
        shared = self.shared

        def timed(original):
            def fetch_batch(fetcher, index):
                recording, step = _SHARED.unpack_from(shared, 0)
                if not recording:
                    return original(fetcher, index)
                start = time.time()
                try:
                    return original(fetcher, index)
                finally:
                    now = time.time()
                    writer.add(DATALOADER_WORKER, start, now, step, worker_pid=pid)
                    writer.rotate_if_due(now)

            return fetch_batch

        for cls in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher):
            cls.fetch = timed(cls.fetch)  # this process only: it is a worker
