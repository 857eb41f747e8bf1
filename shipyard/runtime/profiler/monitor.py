"""The system monitor of one instance: every interval, CPU per core (utilisation and I/O wait), memory,
disk I/O, network and, where NVML finds GPUs, GPU utilisation and memory, written as SageMaker writes
them (JSON lines, one file per minute, see docs/profiler.md). Runs as a thread of the agent.

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


class SystemMonitor:
    def __init__(self, root: Path, node: str, interval_millis: int, gpu_ids: tuple[str, ...] | None = None) -> None:
        """gpu_ids: the machine's GPUs given to this instance (its CUDA_VISIBLE_DEVICES), named gpu0, gpu1, ...
        as the instance sees them; None: every GPU of the machine."""
        self.root, self.node, self.interval = Path(root), node, interval_millis / 1000.0
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
        times = psutil.cpu_times_percent(percpu=True)
        for i, (busy, t) in enumerate(zip(psutil.cpu_percent(percpu=True), times)):
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
        psutil.cpu_percent(percpu=True)  # the first call only sets the baseline
        psutil.cpu_times_percent(percpu=True)
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
