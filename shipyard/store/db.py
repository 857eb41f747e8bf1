"""SQLite store. Every write is one transaction, so a crash of the writing process (the controller,
a CLI) leaves each record either before or after the change, never half-written; WAL lets readers
(`shipyard jobs describe`, a waiting `fit()`) read while the controller writes. Loading it loads no
pydantic (a job's spec is parsed when a record is read), so a controller waiting for capacity stays small."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard.errors import ConflictError, NotFoundError, closest, unknown_name_error
from shipyard.settings import shipyard_home
from shipyard.spec.statuses import TERMINAL_STATUSES
from shipyard.store.migrations import migrate

if TYPE_CHECKING:
    from shipyard.spec.job import JobSpec

# Read by name, not `SELECT *`: the table grows (store/migrations.py), `_record` takes these.
JOB_COLUMNS = ("name, spec, status, secondary_status, failure_reason, creation_time, last_modified_time, "
               "training_start_time, training_end_time, model_artifacts, output_artifacts, controller_pid, "
               "controller_started, stop_requested")
# Every table with rows of a job, and its column that names the job (store/migrations.py). A warm pool
# goes with the last of its uses; pools.job and pool_uses.reused_by keep a deleted job's name, as history.
JOB_ROWS = (("jobs", "name"), ("transitions", "job"), ("attempts", "job"), ("events", "job"), ("metrics", "job"),
            ("rule_statuses", "job"), ("queue", "job"), ("pool_uses", "job"), ("tuning_trials", "job"))
STOP_REQUESTED = "Stop requested"   # the reason of a stop asked for without one


@dataclass(frozen=True)
class Transition:
    status: str
    start_time: float
    end_time: float | None
    message: str


@dataclass(frozen=True)
class JobRecord:
    spec: JobSpec
    status: str
    secondary_status: str
    failure_reason: str | None
    creation_time: float
    last_modified_time: float
    training_start_time: float | None
    training_end_time: float | None
    model_artifacts: str | None
    output_artifacts: str | None
    controller_pid: int | None
    controller_started: float | None
    stop_requested: bool
    transitions: tuple[Transition, ...] = field(default=())

    @property
    def name(self) -> str:
        return self.spec.job_name

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


_UPDATABLE = {
    "failure_reason", "training_start_time", "training_end_time", "model_artifacts",
    "output_artifacts", "controller_pid", "controller_started",
}


class Store:
    def __init__(self, home: Path | str | None = None) -> None:
        self.home = Path(home).expanduser() if home else shipyard_home()
        self.home.mkdir(parents=True, exist_ok=True)
        self.path = self.home / "shipyard.db"
        migrate(self.path)
        self._connections = threading.local()

    def _connection(self) -> sqlite3.Connection:
        """This thread's connection, kept: a connection per transaction cost 1.3 ms of CPU and 3.4 ms in all
        (the last one to close checkpoints the WAL and deletes it), and a job's processes make dozens."""
        kept = self._connections
        if getattr(kept, "pid", None) != os.getpid():   # none yet, or this is a forked child: its own
            kept.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            kept.db.execute("PRAGMA synchronous=NORMAL")
            kept.pid = os.getpid()
        return kept.db

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read-only snapshot: a deferred transaction, which in WAL mode never waits for a writer nor
        makes one wait (BEGIN IMMEDIATE would), so many readers (a server's pages) cannot slow a controller."""
        db = self._connection()
        db.execute("BEGIN")
        try:
            yield db
        finally:
            db.execute("COMMIT")

    # -- paths -------------------------------------------------------------------------------
    def job_dir(self, name: str) -> Path:
        return self.home / "jobs" / name

    def log_path(self, name: str, host: str) -> Path:
        return self.job_dir(name) / "logs" / f"{host}.log"

    # -- jobs --------------------------------------------------------------------------------
    def create_job(self, spec: JobSpec) -> JobRecord:
        now = time.time()
        with self._tx() as db:
            if db.execute("SELECT 1 FROM jobs WHERE name=?", (spec.job_name,)).fetchone():
                raise ConflictError(
                    f"a job named {spec.job_name!r} already exists; job names are unique, pick another "
                    "or leave job_name unset to generate one"
                )
            db.execute(
                "INSERT INTO jobs (name, spec, status, secondary_status, creation_time, last_modified_time)"
                " VALUES (?, ?, 'InProgress', 'Starting', ?, ?)",
                (spec.job_name, spec.model_dump_json(), now, now),
            )
            db.execute(
                "INSERT INTO transitions (job, seq, status, start_time, message) VALUES (?, 0, 'Starting', ?, ?)",
                (spec.job_name, now, "Starting the training job"),
            )
        self.job_dir(spec.job_name).mkdir(parents=True, exist_ok=True)
        return self.get_job(spec.job_name)

    def exists(self, name: str) -> bool:
        with self._read() as db:
            return db.execute("SELECT 1 FROM jobs WHERE name=?", (name,)).fetchone() is not None

    def get_job(self, name: str) -> JobRecord:
        with self._read() as db:
            row = db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE name=?", (name,)).fetchone()
            if row is None:
                raise _no_job(db, name)
            transitions = db.execute(
                "SELECT status, start_time, end_time, message FROM transitions WHERE job=? ORDER BY seq", (name,)
            ).fetchall()
            return _record(row, transitions)

    def status(self, name: str) -> str | None:
        """The job's status alone (None: no such job), without parsing its spec."""
        with self._read() as db:
            row = db.execute("SELECT status FROM jobs WHERE name=?", (name,)).fetchone()
        return row and row[0]

    def spec_fields(self, name: str) -> dict:
        """The job's spec as stored (JSON), unvalidated: for a controller deciding before it loads pydantic."""
        with self._read() as db:
            row = db.execute("SELECT spec FROM jobs WHERE name=?", (name,)).fetchone()
        if row is None:
            raise NotFoundError(f"no job named {name!r}")
        return json.loads(row[0])

    def list_jobs(self, status: str | None = None, limit: int | None = None, offset: int = 0,
                  name_contains: str | None = None) -> list[JobRecord]:
        """Newest first; `status` and `name_contains` filter, `limit` and `offset` page."""
        where, args = _job_filter(status, name_contains)
        query = f"SELECT {JOB_COLUMNS} FROM jobs{where} ORDER BY creation_time DESC"
        if limit or offset:
            query += f" LIMIT {int(limit) if limit else -1} OFFSET {int(offset)}"
        with self._read() as db:
            return [_record(row, ()) for row in db.execute(query, args).fetchall()]

    def count_jobs(self, status: str | None = None, name_contains: str | None = None) -> int:
        where, args = _job_filter(status, name_contains)
        with self._read() as db:
            return db.execute(f"SELECT COUNT(*) FROM jobs{where}", args).fetchone()[0]

    def transition(self, name: str, status: str, secondary: str, message: str = "") -> bool:
        """Move a job to (status, secondary): a new transition when the secondary status changes, else
        the current one's message becomes `message` (news of the same step: a place in the queue). A job
        in a terminal status never moves again, so a late writer cannot overwrite a true final state;
        returns whether the move happened."""
        now = time.time()
        with self._tx() as db:
            row = db.execute("SELECT status, secondary_status FROM jobs WHERE name=?", (name,)).fetchone()
            if row is None:
                raise NotFoundError(f"no job named {name!r}")
            if row[0] in TERMINAL_STATUSES:
                return False
            db.execute(
                "UPDATE jobs SET status=?, secondary_status=?, last_modified_time=? WHERE name=?",
                (status, secondary, now, name),
            )
            if secondary != row[1]:
                seq = db.execute("SELECT COALESCE(MAX(seq), -1) FROM transitions WHERE job=?", (name,)).fetchone()[0]
                db.execute("UPDATE transitions SET end_time=? WHERE job=? AND seq=?", (now, name, seq))
                end = now if status in TERMINAL_STATUSES else None
                db.execute(
                    "INSERT INTO transitions (job, seq, status, start_time, end_time, message) VALUES (?, ?, ?, ?, ?, ?)",
                    (name, seq + 1, secondary, now, end, message),
                )
            else:
                db.execute("UPDATE transitions SET message=? WHERE job=? AND seq=(SELECT MAX(seq) FROM transitions"
                           " WHERE job=?)", (message, name, name))
        return True

    def update_job(self, name: str, **fields: object) -> None:
        unknown = set(fields) - _UPDATABLE
        if unknown:
            raise TypeError(f"not updatable: {sorted(unknown)}")
        sets = ", ".join(f"{key}=?" for key in fields)
        with self._tx() as db:
            db.execute(
                f"UPDATE jobs SET {sets}, last_modified_time=? WHERE name=?",
                (*fields.values(), time.time(), name),
            )

    def update_spec(self, name: str, spec: JobSpec) -> bool:
        """A running job's spec changed (UpdateTrainingJob: its profiling); its controller sees the new
        `spec_version` and applies it. Returns whether the job was still in progress."""
        with self._tx() as db:
            cur = db.execute("UPDATE jobs SET spec=?, spec_version=spec_version+1, last_modified_time=?"
                             " WHERE name=? AND status='InProgress'", (spec.model_dump_json(), time.time(), name))
            return cur.rowcount > 0

    def update_tags(self, name: str, tags: list[dict[str, str]]) -> None:
        """AddTags / DeleteTags: a job's tags, at any status. Not a change its controller applies, so the spec
        version stays."""
        from shipyard.spec.job import JobSpec

        with self._tx() as db:
            row = db.execute("SELECT spec FROM jobs WHERE name=?", (name,)).fetchone()
            if row is None:
                raise NotFoundError(f"no job named {name!r}")
            spec = JobSpec.model_validate_json(row[0]).model_copy(update={"tags": tuple(tags)})
            db.execute("UPDATE jobs SET spec=?, last_modified_time=? WHERE name=?",
                       (spec.model_dump_json(), time.time(), name))

    def spec_version(self, name: str) -> int:
        """How many times the job's spec was updated (a cheap look for its controller)."""
        with self._read() as db:
            row = db.execute("SELECT spec_version FROM jobs WHERE name=?", (name,)).fetchone()
        return row[0] if row else 0

    def request_stop(self, name: str, reason: str | None = None) -> bool:
        """Ask the job's controller to stop it; `reason` (the first one given) becomes the message of its
        Stopping and Stopped transitions. Returns whether the job was still running."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE jobs SET stop_requested=1, stop_reason=COALESCE(stop_reason, ?), last_modified_time=?"
                f" WHERE name=? AND status NOT IN ({', '.join('?' * len(TERMINAL_STATUSES))})",
                (reason, time.time(), name, *TERMINAL_STATUSES),
            )
            return cur.rowcount > 0

    def request_interrupt(self, name: str, host: str | None = None) -> bool:
        """Ask the controller to simulate a spot interruption (of one host, or of the job's capacity)."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE jobs SET interrupt_requested=? WHERE name=? AND status='InProgress'", (host or "*", name)
            )
            return cur.rowcount > 0

    def take_interrupt_request(self, name: str) -> str | None:
        with self._tx() as db:
            row = db.execute("SELECT interrupt_requested FROM jobs WHERE name=?", (name,)).fetchone()
            if row and row[0]:
                db.execute("UPDATE jobs SET interrupt_requested=NULL WHERE name=?", (name,))
                return row[0]
        return None

    def stop_requested(self, name: str) -> str | None:
        """Why the job was asked to stop (STOP_REQUESTED when no reason was given); None if it was not."""
        with self._read() as db:
            row = db.execute("SELECT stop_requested, stop_reason FROM jobs WHERE name=?", (name,)).fetchone()
        return (row[1] or STOP_REQUESTED) if row and row[0] else None

    # -- attempts: a spot restart or a retry is a new attempt of the same job -------------------
    def start_attempt(self, name: str, start_time: float) -> int:
        """Record the next attempt (its instances started at start_time); returns its number."""
        with self._tx() as db:
            number = db.execute("SELECT COALESCE(MAX(number), 0) + 1 FROM attempts WHERE job=?", (name,)).fetchone()[0]
            db.execute("INSERT INTO attempts (job, number, start_time) VALUES (?, ?, ?)", (name, number, start_time))
        return number

    def update_attempt(self, name: str, number: int, **fields: object) -> None:
        unknown = set(fields) - {"start_time", "end_time", "outcome", "reason", "restored_checkpoint"}
        if unknown:
            raise TypeError(f"not updatable: {sorted(unknown)}")
        sets = ", ".join(f"{key}=?" for key in fields)
        with self._tx() as db:
            db.execute(f"UPDATE attempts SET {sets} WHERE job=? AND number=?", (*fields.values(), name, number))

    def attempts(self, name: str) -> list[dict]:
        return self.attempts_of([name])[name]

    def attempts_of(self, names: list[str]) -> dict[str, list[dict]]:
        """Each job's attempts, in one read (a page of jobs priced at once)."""
        keys = ("number", "start_time", "end_time", "outcome", "reason", "restored_checkpoint")
        found: dict[str, list[dict]] = {name: [] for name in names}
        with self._read() as db:
            for start in range(0, len(names), 500):   # SQLite's limit on a statement's parameters
                chunk = names[start:start + 500]
                rows = db.execute(
                    f"SELECT job, {', '.join(keys)} FROM attempts WHERE job IN ({', '.join('?' * len(chunk))})"
                    " ORDER BY job, number", chunk).fetchall()
                for job, *values in rows:
                    found[job].append(dict(zip(keys, values)))
        return found

    # -- events and metrics -------------------------------------------------------------------
    def add_event(self, name: str, kind: str, message: str, host: str | None = None) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO events (job, ts, kind, host, message) VALUES (?, ?, ?, ?, ?)",
                (name, time.time(), kind, host, message),
            )

    def events(self, name: str, kind: str | None = None, after: int = 0) -> list[dict]:
        """Events in the order they were added; `after` is the last id already seen."""
        query = "SELECT rowid, ts, kind, host, message FROM events WHERE job=? AND rowid>?"
        args: list[object] = [name, after]
        if kind:
            query, args = query + " AND kind=?", [*args, kind]
        with self._read() as db:
            rows = db.execute(query + " ORDER BY rowid", args).fetchall()
        return [{"id": r[0], "ts": r[1], "kind": r[2], "host": r[3], "message": r[4]} for r in rows]

    def add_metrics(self, name: str, rows: list[tuple[str, str, float, float]]) -> None:
        """rows: (metric name, host, timestamp, value)."""
        if rows:
            with self._tx() as db:
                db.executemany(
                    "INSERT INTO metrics (job, name, host, ts, value) VALUES (?, ?, ?, ?, ?)",
                    [(name, *row) for row in rows],
                )

    # -- rules evaluated beside the job (debugger, profiler) -------------------------------------
    def set_rule_status(self, name: str, kind: str, rule: str, status: str, details: str = "") -> None:
        """kind: "debugger" or "profiler"; status: InProgress, NoIssuesFound, IssuesFound, Error, Stopped."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO rule_statuses (job, kind, rule, status, details, last_modified) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (job, kind, rule) DO UPDATE SET status=excluded.status, details=excluded.details,"
                " last_modified=excluded.last_modified",
                (name, kind, rule, status, details, time.time()),
            )

    def rule_statuses(self, name: str, kind: str) -> list[dict]:
        with self._read() as db:
            rows = db.execute("SELECT rule, status, details, last_modified FROM rule_statuses WHERE job=? AND kind=?"
                              " ORDER BY rowid", (name, kind)).fetchall()
        return [{"rule": r[0], "status": r[1], "details": r[2], "last_modified": r[3]} for r in rows]

    def metrics(self, name: str, metric: str | None = None) -> list[dict]:
        query = "SELECT name, host, ts, value FROM metrics WHERE job=?"
        args: list[object] = [name]
        if metric:
            query, args = query + " AND name=?", [name, metric]
        with self._read() as db:
            rows = db.execute(query + " ORDER BY ts, rowid", args).fetchall()
        return [{"name": r[0], "host": r[1], "ts": r[2], "value": r[3]} for r in rows]

    def metric_series(self, name: str, metric: str | None = None, since: float | None = None) -> dict[str, set[str]]:
        """{metric: the hosts that emitted it} of a job's metrics (`since`: from points at or after that time),
        without reading the points."""
        query, args = "SELECT DISTINCT name, host FROM metrics WHERE job=?", [name]
        if metric:
            query, args = query + " AND name=?", [*args, metric]
        if since is not None:
            query, args = query + " AND ts>=?", [*args, since]
        with self._read() as db:
            rows = db.execute(query, args).fetchall()
        series: dict[str, set[str]] = {}
        for metric_name, host in rows:
            series.setdefault(metric_name, set()).add(host)
        return series


    # -- deleting what the store keeps of ended jobs --------------------------------------------
    def delete_job(self, name: str) -> None:
        """Forget an ended job: its rows in every table and its directory (logs, instance trees, profiler
        report). What it wrote elsewhere (output path, checkpoint and channel URIs) is not touched. Raises
        NotFoundError for no such job; ConflictError for one not ended, a tuning job's trial (deleted with
        its tuning job, TuningStore.delete) or one whose warm pool is not Terminated."""
        with self._read() as db:
            if db.execute("SELECT 1 FROM jobs WHERE name=?", (name,)).fetchone() is None:
                raise _no_job(db, name)
        self._forget([name])

    def prunable(self, before: float | None = None, status: str | None = None) -> list[str]:
        """The jobs `delete_job` deletes that ended (as `status` only, one of Completed, Failed, Stopped)
        before `before` (seconds since the epoch; None: whenever), oldest first. A job ended at its
        training_end_time, or its last change when it never trained."""
        if status is not None and status not in TERMINAL_STATUSES:
            raise unknown_name_error("status", status, TERMINAL_STATUSES)
        args: list[object] = [status] if status else sorted(TERMINAL_STATUSES)
        ended = "COALESCE(training_end_time, last_modified_time)"
        query = f"SELECT name FROM jobs WHERE status IN ({', '.join('?' * len(args))})"
        if before is not None:
            query, args = f"{query} AND {ended} < ?", [*args, before]
        with self._read() as db:
            names = [row[0] for row in db.execute(f"{query} ORDER BY {ended}, name", args)]
            return [name for name in names if _refusal(db, name) is None]

    def _forget(self, jobs: list[str], tuning_job: str | None = None, directories: tuple[Path, ...] = (),
                statements: tuple[tuple[str, tuple], ...] = ()) -> None:
        """Delete the jobs' directories and `directories`, then, in one transaction, the jobs' rows and
        `statements`; nothing when one of the jobs must stay (`_refusal`; `tuning_job`: the one deleted
        with its trials). Directories first: a crash between leaves rows that a second delete clears,
        never a directory that a new job of the same name would inherit."""
        with self._read() as db:
            refusal = next(filter(None, (_refusal(db, job, tuning_job) for job in jobs)), None)
        if refusal:
            raise ConflictError(refusal)
        for directory in (*map(self.job_dir, jobs), *directories):
            if directory.exists():
                shutil.rmtree(directory)
        with self._tx() as db:
            for table, column in JOB_ROWS:
                db.executemany(f"DELETE FROM {table} WHERE {column}=?", [(job,) for job in jobs])
            db.execute("DELETE FROM pools WHERE status='Terminated' AND name NOT IN (SELECT pool FROM pool_uses)")
            for statement, args in statements:
                db.execute(statement, args)


def _job_filter(status: str | None, name_contains: str | None) -> tuple[str, list[object]]:
    clauses, args = [], []
    if status:
        clauses, args = ["status=?"], [status]
    if name_contains:
        # instr, not LIKE: a name's own `%` and `_` match themselves
        clauses.append("instr(name, ?) > 0")
        args.append(name_contains)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args


def _no_job(db: sqlite3.Connection, name: str) -> NotFoundError:
    guess = closest(name, [r[0] for r in db.execute("SELECT name FROM jobs")])
    hint = f"; did you mean {guess!r}?" if guess else "; `shipyard jobs list` shows the jobs"
    return NotFoundError(f"no job named {name!r}{hint}")


def _refusal(db: sqlite3.Connection, name: str, tuning_job: str | None = None) -> str | None:
    """Why the job's local data must stay (None: it may go): it is a trial of a tuning job (other than
    `tuning_job`, deleted with its trials), it has not ended, or a warm pool it started or is on lives (its
    keeper is the controller of the job that started it)."""
    trial = db.execute("SELECT tuning_job FROM tuning_trials WHERE job=? AND tuning_job IS NOT ?",
                       (name, tuning_job)).fetchone()
    if trial:
        return (f"job {name!r} is a trial of tuning job {trial[0]!r} and is deleted with it: "
                f"`shipyard tuning delete {trial[0]}`")
    row = db.execute("SELECT status FROM jobs WHERE name=?", (name,)).fetchone()
    if row and row[0] not in TERMINAL_STATUSES:
        return f"job {name!r} has not ended (it is {row[0]}); stop it first: `shipyard jobs stop {name}`"
    pool = db.execute("SELECT name, status, job FROM pools WHERE ? IN (name, job) AND status != 'Terminated'",
                      (name,)).fetchone()
    if pool:
        pool_name, status, on = pool
        how, other = ("is on", "") if on == name else ("started", f" (job {on!r} is on it)")
        return (f"job {name!r} {how} warm pool {pool_name!r}, which is {status}{other}; it can be deleted once the "
                f"pool is Terminated (`shipyard pools release {pool_name}` ends an Available pool)")
    return None


def _record(row: tuple, transitions: tuple | list) -> JobRecord:
    from shipyard.spec.job import JobSpec

    (name, spec, status, secondary, reason, created, modified, start, end, model, output,
     pid, pid_started, stop) = row
    return JobRecord(
        spec=JobSpec.model_validate(json.loads(spec)),
        status=status,
        secondary_status=secondary,
        failure_reason=reason,
        creation_time=created,
        last_modified_time=modified,
        training_start_time=start,
        training_end_time=end,
        model_artifacts=model,
        output_artifacts=output,
        controller_pid=pid,
        controller_started=pid_started,
        stop_requested=bool(stop),
        transitions=tuple(Transition(*t) for t in transitions),
    )
