"""The system monitor of one instance: every interval, CPU per core (utilisation and I/O wait), memory,
disk I/O, network and, where NVML finds GPUs, GPU utilisation and memory, written as SageMaker writes
them (JSON lines, one file per minute, see docs/profiler.md). Runs as a thread of the agent.

Several instances may share one machine (local mode runs N of them side by side), so the machine's CPU
utilisation would show every instance alike: CPU utilisation is what the instance's own processes used
(ProcessTreeCPU). I/O wait, memory, disk and network stay the machine's: Linux accounts them to no
process without delay accounting (off by default), and the network and disks are shared anyway.

Each minute's file is rewritten whole (to a temporary name, then renamed) after every snapshot, so a
reader or the upload sync never sees a torn line."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

import psutil

from shipyard.contract.profiler import system_file

log = logging.getLogger(__name__)


def _nvml(gpu_ids: tuple[str, ...] | None):
    """pynvml (nvidia-ml-py) and its handles for this instance's GPUs (the machine's indices in gpu_ids;
    None: every GPU), or None where NVML cannot start (no driver, no GPU, no binding): then the monitor
    records no GPU metrics, which is not an error."""
    if gpu_ids == ():
        return None  # an instance given no GPU: nothing to ask NVML
    try:
        import pynvml

        pynvml.nvmlInit()
        indices = range(pynvml.nvmlDeviceGetCount()) if gpu_ids is None else [int(i) for i in gpu_ids]
        return pynvml, [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
    except Exception as exc:
        log.debug("no GPU metrics: NVML did not initialise (%s)", exc)
        return None


class ProcessTreeCPU:
    """The CPU used by one process and all its descendants, per core of the machine.

    Each process's CPU time since the last sample goes to the core it last ran on (all Linux tells); what
    is more than one core's worth (a process of several threads) goes to the least busy cores. A process
    that ended since is still counted: once reaped, its time is in an ancestor's children_user and
    children_system, less what earlier samples counted of it."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.cores = psutil.cpu_count() or 1
        self._seconds: dict[tuple[int, float], float] = {}  # (pid, create time) -> CPU seconds counted so far
        self._parents: dict[int, int] = {}  # pid -> parent pid, of the processes last seen
        self._time = time.monotonic()
        self.sample()  # the baseline

    def _tree(self) -> list[psutil.Process]:
        try:
            return [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return []

    def sample(self) -> list[float]:
        """Each core's % busy with the tree's processes since the last sample."""
        now = time.monotonic()
        interval, self._time = max(now - self._time, 1e-6), now
        seconds, parents, busy = {}, {}, {}  # busy: pid -> [core, CPU seconds since the last sample]
        for process in self._tree():
            try:
                with process.oneshot():
                    key, times = (process.pid, process.create_time()), process.cpu_times()
                    seconds[key] = times.user + times.system + times.children_user + times.children_system
                    parents[process.pid] = process.ppid()
                    busy[process.pid] = [process.cpu_num(), seconds[key] - self._seconds.get(key, 0.0)]
            except psutil.Error:
                continue  # ended meanwhile: its parent's children times will have it
        for (pid, _), counted in self._seconds.items():
            if pid not in busy:  # ended: its nearest living ancestor holds its time now, counted already in part
                ancestor, seen = self._parents.get(pid), set()
                while ancestor is not None and ancestor not in busy and ancestor not in seen:
                    seen.add(ancestor)
                    ancestor = self._parents.get(ancestor)
                if ancestor in busy:
                    busy[ancestor][1] -= counted
        self._seconds, self._parents = seconds, parents
        percent = [0.0] * self.cores
        for core, used in busy.values():
            percent[core % self.cores] += 100 * max(used, 0.0) / interval
        excess = sum(max(p - 100, 0.0) for p in percent)
        percent = [min(p, 100.0) for p in percent]
        for core in sorted(range(self.cores), key=lambda c: percent[c]):
            added = min(100.0 - percent[core], excess)
            percent[core], excess = percent[core] + added, excess - added
        return percent


class SystemMonitor:
    def __init__(self, root: Path, node: str, interval_millis: int, gpu_ids: tuple[str, ...] | None = None,
                 pid: int | None = None) -> None:
        """gpu_ids: the machine's GPUs given to this instance (its CUDA_VISIBLE_DEVICES), named gpu0, gpu1, ...
        as the instance sees them; None: every GPU of the machine. pid: the instance's root process, by default
        this one, the instance's agent: everything the instance runs descends from it (the entry point, the
        launchers and their ranks, forked by the zygote the agent started, and their dataloader workers)."""
        self.root, self.node, self.interval = Path(root), node, interval_millis / 1000.0
        self.cpu = ProcessTreeCPU(os.getpid() if pid is None else pid)
        psutil.cpu_times_percent(percpu=True)  # the first call only sets the baseline
        self.sampling = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lines: list[str] = []
        self._path: str | None = None
        self._last: tuple | None = None
        self._gpus = _nvml(gpu_ids)

    def _record(self, type_: str, name: str, dimension: str, value: float, ts: float) -> None:
        self._lines.append(json.dumps({"Type": type_, "Name": name, "Dimension": dimension,
                                       "Value": round(float(value), 3), "NodeId": self.node, "Timestamp": ts}))

    def sample(self) -> None:
        ts = time.time()
        path = system_file(str(self.root), self.node, ts)
        if path != self._path:
            self._path, self._lines = path, []
        for i, (busy, t) in enumerate(zip(self.cpu.sample(), psutil.cpu_times_percent(percpu=True))):
            self._record("cpu", f"cpu{i}", "CPUUtilization", busy, ts)
            self._record("cpu", f"cpu{i}", "I/OWaitPercentage", getattr(t, "iowait", 0.0), ts)
        self._record("memory", "MemoryUsedPercent", "", psutil.virtual_memory().percent, ts)
        disk, net = psutil.disk_io_counters(), psutil.net_io_counters()
        now = (ts, disk.read_count + disk.write_count if disk else 0, disk.read_bytes if disk else 0,
               disk.write_bytes if disk else 0, net.bytes_recv, net.bytes_sent)
        if self._last is not None:
            dt = max(now[0] - self._last[0], 1e-6)
            rates = [(b - a) / dt for a, b in zip(self._last[1:], now[1:])]
            self._record("i/o", "IOPS", "", rates[0], ts)
            self._record("i/o", "ReadThroughputInBytesPerSecond", "", rates[1], ts)
            self._record("i/o", "WriteThroughputInBytesPerSecond", "", rates[2], ts)
            # The whole instance's traffic: on machines you own there is no separate platform traffic.
            self._record("network", "ReceiveBytesPerSecond", "Algorithm", rates[3], ts)
            self._record("network", "TransmitBytesPerSecond", "Algorithm", rates[4], ts)
        self._last = now
        if self._gpus is not None:
            nvml, handles = self._gpus
            for i, handle in enumerate(handles):
                # Utilisation: % of the last sample period a kernel ran; memory: % of the GPU's memory in use.
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                self._record("gpu", f"gpu{i}", "GPUUtilization", rates.gpu, ts)
                self._record("gpu", f"gpu{i}", "GPUMemoryUtilization", 100.0 * memory.used / memory.total, ts)
        self._write()

    def _write(self) -> None:
        path = Path(self._path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text("\n".join(self._lines) + "\n")
        os.replace(tmp, path)

    def run(self) -> None:
        while not self._stop.wait(self.interval):   # read each time: `follow` may change it
            if not self.sampling:
                continue
            try:
                self.sample()
            except Exception:
                pass  # monitoring must never disturb the job; a gap in the data is visible in the report

    def follow(self, interval_millis: int | None) -> None:
        """The job's profiling changed while it runs: a new interval, or (None) no samples until it is
        turned on again. The same monitor goes on, so its current file keeps the samples it has."""
        self.sampling = interval_millis is not None
        if interval_millis is not None:
            self.interval = interval_millis / 1000.0

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="shipyard-system-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._gpus is not None:
            try:
                self._gpus[0].nvmlShutdown()
            except Exception:
                pass  # the process ends soon; NVML's state does not outlive it
