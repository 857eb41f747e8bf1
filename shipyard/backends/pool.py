"""Warm instances on this machine: the sandboxes of a job with keep_alive_period_in_seconds run
runtime/warm.py, which outlives the job and runs the next matching one (store/pools.py has the pools,
docs/warm-pools.md what users get). `start()` boots a new one (the job's controller is its parent and
so the pool's keeper); `attach()` runs a job on one a pool already has. Either way the job is sent over
the warm process's socket and the controller sees an Instance like a cold one's."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path

import psutil

from shipyard.runtime import warm, zygote
from shipyard.runtime.control import CONTROL_FILE, ControlChannel

POOLS_DIR = "pools"
# The directory every job on a pool finds again, as SageMaker's persistent warm pool cache.
CACHE_DIR = "/opt/ml/sagemaker/warmpoolcache"
CACHE_VARIABLE = "SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY"
BOOT_SECONDS = 180.0   # an interpreter and `import torch` on a loaded machine
# What a warm process imports before any job, by the estimator's framework.
PRELOAD = {"pytorch": ("torch", "torch.distributed.run"), "tensorflow": ("tensorflow",),
           "xgboost": ("xgboost",), "sklearn": ("sklearn",)}


def warm_argv(directory: Path, framework: str | None) -> list[str]:
    import sys

    preload = [arg for module in PRELOAD.get(framework or "", ()) for arg in ("--preload", module)]
    return [sys.executable, "-m", "shipyard.runtime.warm", str(directory), *preload]


class WarmInstance:
    """A job's instance on a warm process. `process`: the sandbox, when this controller started it."""

    waiting_for = None
    lost_reason = None

    def __init__(self, plan, directory: Path, process: subprocess.Popen | None = None, sock=None) -> None:
        self.plan, self.directory, self.process = plan, directory, process
        self.control = ControlChannel(plan.instance_dir / CONTROL_FILE)
        self.code: int | None = None
        self.sock = sock   # given: the job was sent already (by the submitting client, `adopt`)
        self.warm_pid: int | None = _warm_pid(directory) if sock is not None else None
        self.deadline = time.monotonic() + BOOT_SECONDS
        if process is None and sock is None:
            self._send()

    @property
    def host(self) -> str:
        return self.plan.host

    @property
    def location(self) -> str:
        return f"warm pid {self.warm_pid}" if self.warm_pid else f"pid {self.process.pid} (booting)"

    @property
    def started(self) -> bool:
        """Whether the job reached the warm process (a sandbox still booting has not)."""
        return self.sock is not None or self.code is not None and self.warm_pid is not None

    def _ready(self) -> bool:
        """Whether the warm process listens; a booting one that died or took too long ended the job."""
        if self.sock is not None:
            return True
        if self.process.poll() is not None or time.monotonic() > self.deadline:
            self.code = self.process.poll()
            if self.code is None:
                self.kill()
                self.code = -signal.SIGKILL
            return False
        if not (self.directory / warm.READY_FILE).exists():
            return False
        self._send()
        return True

    def _send(self) -> None:
        self.warm_pid = _warm_pid(self.directory)
        self.sock = zygote.connect(str(self.directory), warm.SOCKET_NAME)
        cache = self.directory / "cache"
        cache.mkdir(exist_ok=True)
        warm_plan = self.plan.warm
        zygote.send(self.sock, {
            "config": str(self.plan.config_path), "instance_dir": self.plan.config.instance_dir,
            "log_path": self.plan.config.log_path,
            "mounts": [*warm_plan["mounts"], ("bind", str(cache), CACHE_DIR)],
            "env": {**warm_plan["env"], CACHE_VARIABLE: CACHE_DIR},
        })
        reply, _ = zygote.receive(self.sock)
        if not reply or not reply.get("started"):
            raise RuntimeError(f"{self.host}: the warm process did not start the job: {reply}")

    def poll(self) -> int | None:
        if self.code is None and self._ready() and select.select([self.sock], [], [], 0)[0]:
            try:
                message, _ = zygote.receive(self.sock)
            except OSError:
                message = None
            self.code = -signal.SIGKILL if message is None else message["exit"]
        return self.code

    def _job_processes(self) -> list[psutil.Process]:
        """The job's processes: everything the warm process started (its agent and all below it)."""
        try:
            return psutil.Process(self.warm_pid).children(recursive=True) if self.warm_pid else []
        except psutil.NoSuchProcess:
            return []

    def terminate(self) -> None:
        if self.sock is None:
            self.kill()
            return
        try:   # the job's agent, the warm process's child, passes the notice on (see local.Instance)
            for proc in psutil.Process(self.warm_pid).children():
                proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass

    def kill(self) -> None:
        if self.sock is None:   # still booting: the sandbox itself goes
            stop(self.process)
            return
        for proc in self._job_processes():
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        deadline = time.monotonic() + 10
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)

    def detach(self) -> None:
        """The job has ended: the warm process goes back to waiting for the next one."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    # -- as a pool's member, for its keeper (control/pools.py) -------------------------------------------
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def release(self) -> None:
        if self.process is not None:
            stop(self.process)

    def member(self) -> dict:
        return {"pid": self.warm_pid}


def start(plan) -> WarmInstance:
    """Boot a warm sandbox for this instance; the job is sent once it listens (`poll()`), so a job's
    instances boot side by side."""
    directory = Path(plan.warm["dir"])
    directory.mkdir(parents=True, exist_ok=True)
    (directory / warm.READY_FILE).unlink(missing_ok=True)
    with open(directory / "warm.log", "ab") as log:
        process = subprocess.Popen(plan.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   start_new_session=True)
    return WarmInstance(plan, directory, process)


def attach(plan, directory: Path) -> WarmInstance:
    """Run this instance's job on the idle warm process in `directory` (a pool's member)."""
    return WarmInstance(plan, directory)


def adopt(plan, directory: Path, fd: int) -> WarmInstance:
    """The instance whose job another process sent (`attach`) over the connection inherited as `fd`."""
    import socket

    return WarmInstance(plan, directory, sock=socket.socket(fileno=fd))


def stop(process: subprocess.Popen) -> None:
    """End a warm sandbox and everything in it (its PID namespace goes with bubblewrap)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _warm_pid(directory: Path) -> int | None:
    """The warm process's pid on this machine (inside the sandbox it is 2)."""
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        # python -m shipyard.runtime.warm DIR ...: the interpreter itself, not bubblewrap, whose command
        # line holds the same words
        if cmdline[1:4] == ["-m", "shipyard.runtime.warm", str(directory)]:
            return proc.pid
    return None
