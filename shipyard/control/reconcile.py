"""Noticing a controller that died: a job whose controller process is gone but whose record still says
InProgress is not in a true state. Any command that reads the job reconciles it first."""

from __future__ import annotations

import time

import psutil

from shipyard.store import JobRecord, Store

SPAWN_WINDOW_SECONDS = 60


def controller_alive(record: JobRecord) -> bool:
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


def reconcile(store: Store, name: str) -> JobRecord:
    record = store.get_job(name)
    if record.terminal or controller_alive(record):
        return record
    # The controller may have finished between the read and the check.
    record = store.get_job(name)
    if record.terminal:
        return record
    reason = (f"InternalServerError: the job's controller (pid {record.controller_pid}) stopped while the job "
              f"was {record.secondary_status}; its log is {store.job_dir(name) / 'controller.log'}")
    store.update_job(name, failure_reason=reason)
    store.transition(name, "Failed", "Failed", reason)
    return store.get_job(name)
