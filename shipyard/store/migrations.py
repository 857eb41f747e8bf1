"""The store's schema, as numbered migrations: the one place its tables are declared, for every store
module (jobs, tuning jobs, warm pools, the capacity queue). A database records the last migration
applied in SQLite's `user_version` (0: none, a new file or a store from before versions were recorded);
opening it applies the ones after, all in one transaction, so a crash leaves it wholly before or after.

A released migration never changes: a new table or column is a new migration at the end of MIGRATIONS
(SQL statements run with `db.execute`, one by one: `executescript` would commit the transaction)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shipyard.errors import StoreVersionError

# The tables as they were when versions began to be recorded. IF NOT EXISTS: a store from before then
# has some of them already (migration 1 then adds what it lacks).
TABLES_AT_VERSION_1 = (
    """CREATE TABLE IF NOT EXISTS jobs (
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
    interrupt_requested TEXT,
    stop_reason TEXT,
    spec_version INTEGER NOT NULL DEFAULT 0
)""",
    """CREATE TABLE IF NOT EXISTS transitions (
    job TEXT NOT NULL,
    seq INTEGER NOT NULL,
    status TEXT NOT NULL,
    start_time REAL NOT NULL,
    end_time REAL,
    message TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (job, seq)
)""",
    """CREATE TABLE IF NOT EXISTS attempts (
    job TEXT NOT NULL,
    number INTEGER NOT NULL,
    start_time REAL NOT NULL,
    end_time REAL,
    outcome TEXT,
    reason TEXT,
    restored_checkpoint TEXT,
    PRIMARY KEY (job, number)
)""",
    """CREATE TABLE IF NOT EXISTS events (
    job TEXT NOT NULL,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    host TEXT,
    message TEXT NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS events_job ON events (job, ts)",
    """CREATE TABLE IF NOT EXISTS metrics (
    job TEXT NOT NULL,
    name TEXT NOT NULL,
    host TEXT NOT NULL,
    ts REAL NOT NULL,
    value REAL NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS metrics_job ON metrics (job, name, ts)",
    """CREATE TABLE IF NOT EXISTS rule_statuses (
    job TEXT NOT NULL,
    kind TEXT NOT NULL,
    rule TEXT NOT NULL,
    status TEXT NOT NULL,
    details TEXT NOT NULL DEFAULT '',
    last_modified REAL NOT NULL,
    PRIMARY KEY (job, kind, rule)
)""",
    # store/tuning.py
    """CREATE TABLE IF NOT EXISTS tuning_jobs (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    failure_reason TEXT,
    creation_time REAL NOT NULL,
    last_modified_time REAL NOT NULL,
    end_time REAL,
    controller_pid INTEGER,
    controller_started REAL,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    completion_reason TEXT,
    restarts INTEGER NOT NULL DEFAULT 0
)""",
    """CREATE TABLE IF NOT EXISTS tuning_trials (
    tuning_job TEXT NOT NULL,
    job TEXT NOT NULL,
    seq INTEGER NOT NULL,
    number INTEGER NOT NULL,
    definition TEXT,
    hyperparameters TEXT NOT NULL,
    state TEXT NOT NULL,
    rung INTEGER NOT NULL DEFAULT 0,
    paused INTEGER NOT NULL DEFAULT 0,
    stop_reason TEXT,
    PRIMARY KEY (tuning_job, job)
)""",
    # store/pools.py
    """CREATE TABLE IF NOT EXISTS pools (
    name TEXT PRIMARY KEY,          -- the job that started its instances
    instance_type TEXT NOT NULL,
    instance_count INTEGER NOT NULL,
    backend TEXT NOT NULL,
    status TEXT NOT NULL,           -- InUse, Available, Terminated
    job TEXT NOT NULL,              -- the job on it now, or the last one
    expires_at REAL,                -- while Available
    keeper_pid INTEGER,
    keeper_started REAL,
    members TEXT NOT NULL,          -- JSON: host -> its warm process (pid; a Ray node's address)
    preload TEXT NOT NULL,          -- JSON: the modules its warm processes imported
    creation_time REAL NOT NULL,
    end_time REAL,
    end_reason TEXT
)""",
    """CREATE TABLE IF NOT EXISTS pool_uses (
    job TEXT PRIMARY KEY,
    pool TEXT NOT NULL,
    keep_alive INTEGER NOT NULL,
    available_since REAL,           -- when the job ended with the pool kept
    released_at REAL,               -- when the pool left it: reused, expired, released
    reused_by TEXT
)""",
    # store/queue.py
    """CREATE TABLE IF NOT EXISTS queue (
    seq INTEGER PRIMARY KEY,      -- submission order
    job TEXT NOT NULL UNIQUE,
    instances INTEGER NOT NULL,
    gpus INTEGER NOT NULL,        -- how many GPUs its instances take
    granted TEXT,                 -- the GPU ids it holds (JSON), once admitted; NULL while it waits
    admitted_time REAL
)""",
)


def _version_1(db: sqlite3.Connection) -> None:
    """The tables; in a store from before versions were recorded, the tables it lacks (each module made
    its own when first used) and the columns added to its tables since they were made (jobs.stop_reason,
    jobs.spec_version), read from the declarations above so that each is declared once."""
    for statement in TABLES_AT_VERSION_1:
        db.execute(statement)
    declared = sqlite3.connect(":memory:")
    try:
        for statement in TABLES_AT_VERSION_1:
            declared.execute(statement)
        tables = [row[0] for row in declared.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            for _cid, column, kind, not_null, default, _pk in declared.execute(f"PRAGMA table_info({table})"):
                if column not in present:
                    constraints = (" NOT NULL" if not_null else "") + ("" if default is None else f" DEFAULT {default}")
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}{constraints}")
    finally:
        declared.close()


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[sqlite3.Connection], None]   # runs inside the migrating transaction


MIGRATIONS = (
    Migration(1, "jobs, transitions, attempts, events, metrics, rule statuses, tuning jobs and trials, warm "
                 "pools and their uses, the capacity queue", _version_1),
)
LATEST = MIGRATIONS[-1].version
TIMEOUT_SECONDS = 30   # as long as the store's own connections wait for a lock


def migrate(path: Path) -> int:
    """Bring the database at `path` to LATEST (made when missing); returns the version it was at. Safe
    from many processes at once: the version is read again inside the write transaction, so a migration
    another process applied meanwhile is not applied twice. A store at LATEST is only read."""
    db = sqlite3.connect(path, timeout=TIMEOUT_SECONDS, isolation_level=None)
    try:
        _wal(db)
        found = _version(db, path)
        if found == LATEST:
            return found
        db.execute("BEGIN IMMEDIATE")
        try:
            found = _version(db, path)
            for migration in MIGRATIONS[found:]:
                migration.apply(db)
            db.execute(f"PRAGMA user_version={LATEST}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return found
    finally:
        db.close()


def _wal(db: sqlite3.Connection) -> None:
    """WAL mode: persistent, a no-op once set. A new file is WAL only once its first write commits: a
    connection that found it empty cannot switch it while another migrates it, and SQLite says so at
    once instead of waiting, so the waiting is done here."""
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _version(db: sqlite3.Connection, path: Path) -> int:
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > LATEST:   # its newer tables would be half-understood, and written wrong
        raise StoreVersionError(path, version, LATEST)
    return version
