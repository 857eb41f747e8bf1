"""SQLite store. Every write is one transaction, so a crash of the writing process (the controller,
a CLI) leaves each record either before or after the change, never half-written; WAL lets readers
(`shipyard jobs describe`, a waiting `fit()`) read while the controller writes. Loading it loads no
pydantic (a job's spec is parsed when a record is read), so a controller waiting for capacity stays small."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard.errors import ConflictError, NotFoundError, closest
from shipyard.settings import shipyard_home
from shipyard.spec.statuses import TERMINAL_STATUSES

if TYPE_CHECKING:
    from shipyard.spec.job import JobSpec

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    secondary_status TEXT NOT NULL,
    failure_reason TEXT,
    creation_time REAL NOT NULL,
    last_modified_time REAL NOT NULL,
    training_start_time REAL,
    training_end_time REAL,
    model_artifacts TEXT,
    output_artifacts TEXT,
    controller_pid INTEGER,
    controller_started REAL,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    interrupt_requested TEXT
);
CREATE TABLE IF NOT EXISTS transitions (
    job TEXT NOT NULL,
    seq INTEGER NOT NULL,
    status TEXT NOT NULL,
    start_time REAL NOT NULL,
    end_time REAL,
    message TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (job, seq)
);
CREATE TABLE IF NOT EXISTS attempts (
    job TEXT NOT NULL,
    number INTEGER NOT NULL,
    start_time REAL NOT NULL,
    end_time REAL,
    outcome TEXT,
    reason TEXT,
    restored_checkpoint TEXT,
    PRIMARY KEY (job, number)
);
CREATE TABLE IF NOT EXISTS events (
    job TEXT NOT NULL,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    host TEXT,
    message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_job ON events (job, ts);
CREATE TABLE IF NOT EXISTS metrics (
    job TEXT NOT NULL,
    name TEXT NOT NULL,
    host TEXT NOT NULL,
    ts REAL NOT NULL,
    value REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS metrics_job ON metrics (job, name, ts);
CREATE TABLE IF NOT EXISTS rule_statuses (
    job TEXT NOT NULL,
    kind TEXT NOT NULL,
    rule TEXT NOT NULL,
    status TEXT NOT NULL,
    details TEXT NOT NULL DEFAULT '',
    last_modified REAL NOT NULL,
    PRIMARY KEY (job, kind, rule)
);
"""
# Columns added since their table was first released (CREATE TABLE above stays as released): a database
# made before one gets it when it is opened.
ADDED_COLUMNS = (("jobs", "stop_reason", "TEXT"), ("jobs", "spec_version", "INTEGER NOT NULL DEFAULT 0"))
# Read by name, not `SELECT *`: the table grows (ADDED_COLUMNS), `_record` takes these.
JOB_COLUMNS = ("name, spec, status, secondary_status, failure_reason, creation_time, last_modified_time, "
               "training_start_time, training_end_time, model_artifacts, output_artifacts, controller_pid, "
               "controller_started, stop_requested")
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
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)  # CREATE ... IF NOT EXISTS: safe from many processes at once
            if _missing_columns(db):
                db.execute("BEGIN IMMEDIATE")  # another process may be adding them right now
                for table, column, declaration in _missing_columns(db):
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
                db.execute("COMMIT")
        finally:
            db.close()

    def create_tables(self, schema: str) -> None:
        """A module's own tables in this database (the queue's, the tuning jobs'), made when missing."""
        db = sqlite3.connect(self.path, timeout=30)
        try:
            db.executescript(schema)  # CREATE ... IF NOT EXISTS: safe from many processes at once
        finally:
            db.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read-only snapshot: a deferred transaction, which in WAL mode never waits for a writer nor
        makes one wait (BEGIN IMMEDIATE would), so many readers (a server's pages) cannot slow a controller."""
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("BEGIN")
            try:
                yield db
            finally:
                db.execute("COMMIT")
        finally:
            db.close()

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
                names = [r[0] for r in db.execute("SELECT name FROM jobs")]
                guess = closest(name, names)
                hint = f"; did you mean {guess!r}?" if guess else "; `shipyard jobs list` shows the jobs"
                raise NotFoundError(f"no job named {name!r}{hint}")
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


def _job_filter(status: str | None, name_contains: str | None) -> tuple[str, list[object]]:
    clauses, args = [], []
    if status:
        clauses, args = ["status=?"], [status]
    if name_contains:
        # instr, not LIKE: a name's own `%` and `_` match themselves
        clauses.append("instr(name, ?) > 0")
        args.append(name_contains)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args


def _missing_columns(db: sqlite3.Connection) -> list[tuple[str, str, str]]:
    return [(table, column, declaration) for table, column, declaration in ADDED_COLUMNS
            if column not in {info[1] for info in db.execute(f"PRAGMA table_info({table})")}]


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
