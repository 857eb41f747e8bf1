"""Noticing a controller that died: a job whose controller process is gone but whose record still says
InProgress is not in a true state. Any command that reads the job reconciles it first.

A dead controller takes its instances with it (their sandboxes die with their parent; without a sandbox
the agents do, and their processes are killed here), so nothing is left running. It is a platform failure: the attempt it was running ends Failed, and the job continues with a
new controller and a new attempt that restores the checkpoints when `max_retry_attempts` has a retry
left; otherwise the job ends Failed, naming the controller. One process decides (a lock per job), so
two commands that notice at once never start two controllers."""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

from shipyard.store import JobRecord, Store
from shipyard.store.queue import Entry

SPAWN_WINDOW_SECONDS = 60


def controller_alive(record: JobRecord | Entry) -> bool:
    """Whether the job's controller runs. A queue entry (store/queue.py) carries the same fields, so a job
    waiting for capacity checks those it waits behind without parsing their specs."""
    if record.controller_pid is None:
        # Created but not yet handed to its controller: the submitting client is about to spawn it.
        return time.time() - record.creation_time < SPAWN_WINDOW_SECONDS
    try:
        process = psutil.Process(record.controller_pid)
        # A reused pid has another start time; a zombie has finished.
        if record.controller_started is not None and abs(process.create_time() - record.controller_started) > 1:
            return False
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@contextmanager
def decider(job_dir: Path):
    """Yields whether this process holds the reconcile lock of a job (or tuning job) directory (another
    process may be deciding)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(job_dir / "reconcile.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def reconcile(store: Store, name: str) -> JobRecord:
    record = store.get_job(name)
    if record.terminal or controller_alive(record):
        return record
    with decider(store.job_dir(name)) as deciding:
        # Re-read under the lock: the controller may have finished, or another process taken over.
        record = store.get_job(name)
        if deciding and not record.terminal and not controller_alive(record):
            _take_over(store, record)
    return store.get_job(name)


def stop(store: Store, name: str) -> JobRecord:
    """Ask the job to stop (`shipyard stop`, the server's stop); a job that already ended is a conflict."""
    from shipyard.errors import ConflictError

    record = reconcile(store, name)
    if record.terminal or not store.request_stop(name):
        raise ConflictError(f"job {name} already ended {store.get_job(name).status}; there is nothing to stop")
    return record


def kill_leftovers(name: str, job_dir: Path) -> None:
    """Without a sandbox an agent dies with its controller (PR_SET_PDEATHSIG) but its script, torchrun's
    workers and sidecars do not. They carry the job's name and its directory in their environment."""
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if env.get("TRAINING_JOB_NAME") == name and str(job_dir) in env.get("PYTHONPATH", ""):
                proc.kill()
        except psutil.Error:
            continue


def _take_over(store: Store, record: JobRecord) -> None:
    from shipyard.control.controller import spawn
    from shipyard.control.retries import may_retry, record_retry

    name = record.name
    kill_leftovers(name, store.job_dir(name))
    reason = (f"InternalServerError: the job's controller (pid {record.controller_pid}) stopped while the job "
              f"was {record.secondary_status}; its log is {store.job_dir(name) / 'controller.log'}")
    attempts = store.attempts(name)
    if attempts and attempts[-1]["end_time"] is None:
        store.update_attempt(name, attempts[-1]["number"], end_time=time.time(), outcome="Failed", reason=reason)
    if stop := store.stop_requested(name):  # what the user asked for has happened: nothing runs any more
        store.add_event(name, "warning", reason)
        store.update_job(name, training_end_time=time.time())
        store.transition(name, "Stopped", "Stopped", f"{stop}; " + reason.split(": ", 1)[1])
    elif may_retry(store, name, record.spec.max_retry_attempts):
        store.add_event(name, "warning", reason)
        store.transition(name, "InProgress", "Starting", record_retry(store, name, reason))
        spawn(store, name, continuing=True)
    else:
        store.update_job(name, failure_reason=reason, training_end_time=time.time())
        store.transition(name, "Failed", "Failed", reason)
