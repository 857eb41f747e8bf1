"""Tuning jobs in the store, beside the jobs: a tuning job's record (its spec, status, the process that
drives it) and its trials, each a training job it started with the configuration it trains. A
configuration is one Optuna trial (`number`); Hyperband's promoted configurations train on in further
jobs that share the number and the checkpoints. Same database, same one-transaction-per-write rule."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from shipyard.errors import ConflictError, NotFoundError, closest
from shipyard.spec.statuses import TERMINAL_STATUSES
from shipyard.spec.tuning import TuningSpec

TUNING_STATUSES = ("InProgress", "Completed", "Failed", "Stopping", "Stopped")
# submitting: recorded, its job maybe not yet created; running: its job exists; ended: its job ended and
# the tuning job has counted it.
TRIAL_STATES = ("submitting", "running", "ended")


@dataclass(frozen=True)
class TuningRecord:
    spec: TuningSpec
    status: str
    failure_reason: str | None
    creation_time: float
    last_modified_time: float
    end_time: float | None
    controller_pid: int | None
    controller_started: float | None
    stop_requested: bool
    completion_reason: str | None
    restarts: int  # tuning processes started after one died

    @property
    def name(self) -> str:
        return self.spec.tuning_job_name

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


@dataclass(frozen=True)
class Trial:
    job: str            # the training job's name
    seq: int            # the order the tuning job started its jobs in, from 1
    number: int         # the configuration (Optuna trial number)
    definition: str | None  # the training definition it trains (create()'s estimator name)
    hyperparameters: dict  # the tuned values (float, int, or the categorical's string)
    state: str
    rung: int           # Hyperband: the rung (epochs) this job passed, or paused at
    paused: bool        # Hyperband: stopped at its rung, may be promoted later
    stop_reason: str | None


_UPDATABLE = {"failure_reason", "end_time", "controller_pid", "controller_started", "completion_reason",
              "restarts"}
_TRIAL_UPDATABLE = {"state", "rung", "paused", "stop_reason"}


class TuningStore:
    """The tuning tables of a Store (shipyard/store/db.py; declared in store/migrations.py)."""

    def __init__(self, store) -> None:
        self.store = store

    def create(self, spec: TuningSpec) -> TuningRecord:
        now = time.time()
        with self.store._tx() as db:
            if db.execute("SELECT 1 FROM tuning_jobs WHERE name=?", (spec.tuning_job_name,)).fetchone():
                raise ConflictError(f"a tuning job named {spec.tuning_job_name!r} already exists; pick another "
                                    "name or leave it unset to generate one")
            db.execute("INSERT INTO tuning_jobs (name, spec, status, creation_time, last_modified_time)"
                       " VALUES (?, ?, 'InProgress', ?, ?)", (spec.tuning_job_name, spec.model_dump_json(), now, now))
        return self.get(spec.tuning_job_name)

    def exists(self, name: str) -> bool:
        with self.store._read() as db:
            return db.execute("SELECT 1 FROM tuning_jobs WHERE name=?", (name,)).fetchone() is not None

    def get(self, name: str) -> TuningRecord:
        with self.store._read() as db:
            row = db.execute("SELECT * FROM tuning_jobs WHERE name=?", (name,)).fetchone()
            if row is None:
                guess = closest(name, [r[0] for r in db.execute("SELECT name FROM tuning_jobs")])
                hint = f"; did you mean {guess!r}?" if guess else "; `shipyard tuning list` shows the tuning jobs"
                raise NotFoundError(f"no tuning job named {name!r}{hint}")
        return _record(row)

    def list(self) -> list[TuningRecord]:
        with self.store._read() as db:
            return [_record(r) for r in db.execute("SELECT * FROM tuning_jobs ORDER BY creation_time DESC")]

    def directory(self, name: str) -> Path:
        """The tuning job's own files: its Optuna study, its process's log."""
        return self.store.home / "tuning" / name

    def delete(self, name: str) -> None:
        """Forget an ended tuning job with its trials: its record, events and directory, and each trial's
        job as Store.delete_job does; what the jobs wrote elsewhere (output path, checkpoints) is not
        touched. Raises NotFoundError for no such tuning job; ConflictError for one not ended, or when a
        trial's job cannot be deleted (not ended; its warm pool not Terminated), deleting nothing."""
        record = self.get(name)
        if not record.terminal:
            raise ConflictError(f"tuning job {name!r} has not ended (it is {record.status}); stop it first: "
                                f"`shipyard tuning stop {name}`")
        self.store._forget([trial.job for trial in self.trials(name)], name, (self.directory(name),),
                           (("DELETE FROM tuning_jobs WHERE name=?", (name,)),
                            ("DELETE FROM events WHERE job=?", (events_key(name),))))

    def set_status(self, name: str, status: str, **fields: object) -> bool:
        """Move a tuning job to `status` (with fields); a terminal one never moves again."""
        unknown = set(fields) - _UPDATABLE
        if unknown or status not in TUNING_STATUSES:
            raise TypeError(f"not updatable: {sorted(unknown) or status}")
        sets = "".join(f", {key}=?" for key in fields)
        with self.store._tx() as db:
            cur = db.execute(f"UPDATE tuning_jobs SET status=?, last_modified_time=?{sets} WHERE name=? AND status"
                             " NOT IN ('Completed', 'Failed', 'Stopped')", (status, time.time(), *fields.values(), name))
            return cur.rowcount > 0

    def update(self, name: str, **fields: object) -> None:
        unknown = set(fields) - _UPDATABLE
        if unknown:
            raise TypeError(f"not updatable: {sorted(unknown)}")
        sets = ", ".join(f"{key}=?" for key in fields)
        with self.store._tx() as db:
            db.execute(f"UPDATE tuning_jobs SET {sets}, last_modified_time=? WHERE name=?",
                       (*fields.values(), time.time(), name))

    def request_stop(self, name: str) -> bool:
        with self.store._tx() as db:
            cur = db.execute("UPDATE tuning_jobs SET stop_requested=1, last_modified_time=? WHERE name=? AND status"
                             " IN ('InProgress', 'Stopping')", (time.time(), name))
            return cur.rowcount > 0

    # -- trials --------------------------------------------------------------------------------
    def add_trial(self, name: str, job: str, number: int, definition: str | None, hyperparameters: dict,
                  rung: int = 0, resumes: str | None = None) -> Trial:
        """Record the next trial; `resumes`: the paused job it continues, no longer paused (at once, so
        a configuration is never promoted twice)."""
        with self.store._tx() as db:
            if resumes:
                db.execute("UPDATE tuning_trials SET paused=0 WHERE tuning_job=? AND job=?", (name, resumes))
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM tuning_trials WHERE tuning_job=?",
                             (name,)).fetchone()[0]
            db.execute("INSERT INTO tuning_trials (tuning_job, job, seq, number, definition, hyperparameters, state,"
                       " rung) VALUES (?, ?, ?, ?, ?, ?, 'submitting', ?)",
                       (name, job, seq, number, definition, json.dumps(hyperparameters), rung))
        return Trial(job, seq, number, definition, hyperparameters, "submitting", rung, False, None)

    def update_trial(self, name: str, job: str, **fields: object) -> None:
        unknown = set(fields) - _TRIAL_UPDATABLE
        if unknown or fields.get("state", TRIAL_STATES[0]) not in TRIAL_STATES:
            raise TypeError(f"not updatable: {sorted(unknown) or fields['state']}")
        sets = ", ".join(f"{key}=?" for key in fields)
        with self.store._tx() as db:
            db.execute(f"UPDATE tuning_trials SET {sets} WHERE tuning_job=? AND job=?", (*fields.values(), name, job))

    def trials(self, name: str) -> list[Trial]:
        with self.store._read() as db:
            rows = db.execute("SELECT job, seq, number, definition, hyperparameters, state, rung, paused, stop_reason"
                              " FROM tuning_trials WHERE tuning_job=? ORDER BY seq", (name,)).fetchall()
        return [Trial(job, seq, number, definition, json.loads(hps), state, rung, bool(paused), reason)
                for job, seq, number, definition, hps, state, rung, paused, reason in rows]


def events_key(name: str) -> str:
    """A tuning job's events sit beside the jobs' under a key no job name can have."""
    return f"tuning/{name}"


def _record(row: tuple) -> TuningRecord:
    (_name, spec, status, reason, created, modified, end, pid, pid_started, stop, completion, restarts) = row
    return TuningRecord(TuningSpec.model_validate(json.loads(spec)), status, reason, created, modified, end, pid,
                        pid_started, bool(stop), completion, restarts)
