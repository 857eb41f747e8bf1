"""The store's schema migrations (store/migrations.py): a store from before versions were recorded is
upgraded with its rows intact to exactly a new store's schema, opening a current one writes nothing,
many processes may open (and upgrade) one at once, a failed migration leaves the store as it was, and a
store from a newer shipyard is refused, never rewritten."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import time

import pytest

from shipyard.errors import StoreVersionError
from shipyard.spec.job import JobSpec
from shipyard.store import Store, migrations
from shipyard.store.db import JOB_ROWS
from shipyard.store.migrations import LATEST, MIGRATIONS, TABLES_AT_VERSION_1, Migration

# The jobs table as first released with attempts and rules (before stop_reason and spec_version), and the
# columns an unversioned shipyard then added, in this order, to a store it opened.
OLD_JOBS = """CREATE TABLE IF NOT EXISTS jobs (
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
)"""
ADDED_COLUMNS = ("ALTER TABLE jobs ADD COLUMN stop_reason TEXT",
                 "ALTER TABLE jobs ADD COLUMN spec_version INTEGER NOT NULL DEFAULT 0")
# The other tables never changed; the job tables were made at every open, the others by their module.
JOB_TABLES = ("transitions", "attempts", "events", "metrics", "rule_statuses")
OTHER_TABLES = tuple(s for s in TABLES_AT_VERSION_1 if not s.startswith("CREATE TABLE IF NOT EXISTS jobs "))


def _spec(name: str = "job-1") -> JobSpec:
    return JobSpec(job_name=name, instance_count=1, output_path="file:///out",
                   hyperparameters={"sagemaker_program": '"t.py"'})


def _old_store(home, added: int, module_tables: bool) -> None:
    """A store as an unversioned shipyard left it, with a job and its rows in every table it has."""
    home.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(home / "shipyard.db")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(OLD_JOBS)
    for statement in OTHER_TABLES:
        if module_tables or any(f" {table} " in statement for table in JOB_TABLES):
            db.execute(statement)
    for statement in ADDED_COLUMNS[:added]:
        db.execute(statement)
    db.execute("INSERT INTO jobs (name, spec, status, secondary_status, creation_time, last_modified_time,"
               " interrupt_requested) VALUES ('job-1', ?, 'InProgress', 'Training', 1.0, 2.0, 'algo-1')",
               (_spec().model_dump_json(),))
    db.execute("INSERT INTO transitions (job, seq, status, start_time, message) VALUES ('job-1', 0, 'Training', 1.0,"
               " 'Training in progress')")
    db.execute("INSERT INTO attempts (job, number, start_time) VALUES ('job-1', 1, 1.5)")
    db.execute("INSERT INTO events (job, ts, kind, message) VALUES ('job-1', 1.6, 'info', 'hello')")
    db.execute("INSERT INTO metrics (job, name, host, ts, value) VALUES ('job-1', 'loss', 'algo-1', 1.7, 0.5)")
    db.execute("INSERT INTO rule_statuses (job, kind, rule, status, last_modified) VALUES ('job-1', 'debugger',"
               " 'LossNotDecreasing', 'InProgress', 1.8)")
    if module_tables:
        db.execute("INSERT INTO queue (job, instances, gpus, granted) VALUES ('job-1', 1, 0, '[]')")
    db.commit()
    db.close()


def _schema(path) -> dict:
    """Every table's columns (in order, with their types, constraints and defaults) and every index."""
    db = sqlite3.connect(path)
    try:
        objects = db.execute("SELECT type, name, tbl_name FROM sqlite_master ORDER BY name").fetchall()
        return {name: db.execute(f"PRAGMA {'table_info' if kind == 'table' else 'index_info'}({name})").fetchall()
                + [table] for kind, name, table in objects}
    finally:
        db.close()


def _rows(path) -> dict:
    db = sqlite3.connect(path)
    try:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {table: db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in tables}
    finally:
        db.close()


def _version(path) -> int:
    db = sqlite3.connect(path)
    try:
        return db.execute("PRAGMA user_version").fetchone()[0]
    finally:
        db.close()


def test_versions_are_numbered_in_order():
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1)) and LATEST == len(MIGRATIONS)


def test_every_table_naming_a_job_is_cleared_when_one_is_deleted(tmp_path):
    """A migration that adds a table with a `job` column adds it to JOB_ROWS (pools.job: history)."""
    db = sqlite3.connect(Store(tmp_path).path)
    tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    naming = {t for t in tables if "job" in {info[1] for info in db.execute(f"PRAGMA table_info({t})")}}
    db.close()
    assert naming - {"pools"} == {table for table, column in JOB_ROWS if column == "job"}


@pytest.mark.parametrize("added, module_tables", [(0, False), (1, False), (2, True)],
                         ids=["before-stop-reason", "before-spec-version", "last-unversioned"])
def test_an_unversioned_store_is_upgraded_with_its_rows_to_a_new_stores_schema(tmp_path, added, module_tables):
    _old_store(tmp_path / "old", added, module_tables)
    before = _rows(tmp_path / "old" / "shipyard.db")
    store = Store(tmp_path / "old")
    assert _version(store.path) == LATEST
    assert _schema(store.path) == _schema(Store(tmp_path / "new").path)
    after = _rows(store.path)
    assert {table: after[table] for table in before} == before
    record = store.get_job("job-1")
    assert (record.status, record.secondary_status, record.last_modified_time) == ("InProgress", "Training", 2.0)
    assert [t.message for t in record.transitions] == ["Training in progress"]
    assert [e["message"] for e in store.events("job-1")] == ["hello"]
    assert [m["value"] for m in store.metrics("job-1")] == [0.5]
    assert store.spec_version("job-1") == 0 and store.take_interrupt_request("job-1") == "algo-1"
    assert store.request_stop("job-1", "because") and store.stop_requested("job-1") == "because"


def test_opening_a_current_store_again_only_reads_it(tmp_path):
    store = Store(tmp_path)
    store.create_job(_spec())
    schema, rows = _schema(store.path), _rows(store.path)
    writer = sqlite3.connect(store.path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")   # a controller writing: an open that wrote would wait for it
    try:
        started = time.monotonic()
        assert migrations.migrate(store.path) == LATEST
        assert [job.name for job in Store(tmp_path).list_jobs()] == ["job-1"]
        assert time.monotonic() - started < 5
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert (_schema(store.path), _rows(store.path)) == (schema, rows)


def _open_and_record(home: str, barrier, name: str) -> None:
    barrier.wait(30)
    Store(home).create_job(_spec(name))


@pytest.mark.parametrize("old", [False, True], ids=["new", "unversioned"])
def test_many_processes_open_a_store_at_once_and_one_migrates_it(tmp_path, monkeypatch, old):
    if old:
        _old_store(tmp_path, 0, False)
    applied = tmp_path / "applied"

    def slow_version_1(db):   # holds the migrating transaction, so the others open meanwhile
        with open(applied, "a") as out:
            out.write(f"{os.getpid()}\n")
        time.sleep(0.5)
        MIGRATIONS[0].apply(db)

    monkeypatch.setattr(migrations, "MIGRATIONS", (Migration(1, "slowly", slow_version_1),))
    context = multiprocessing.get_context("fork")   # the children inherit the slow migration
    barrier = context.Barrier(4)
    procs = [context.Process(target=_open_and_record, args=(str(tmp_path), barrier, f"job-{i + 2}"))
             for i in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert len(applied.read_text().splitlines()) == 1
    store = Store(tmp_path)
    assert _version(store.path) == LATEST
    assert sorted(job.name for job in store.list_jobs()) == ["job-1"] * old + [f"job-{i + 2}" for i in range(4)]


def test_a_failed_migration_leaves_the_store_as_it_was(tmp_path, monkeypatch):
    _old_store(tmp_path, 1, False)
    schema, rows = _schema(tmp_path / "shipyard.db"), _rows(tmp_path / "shipyard.db")

    def broken(db):
        db.execute("CREATE TABLE half_done (x)")
        raise RuntimeError("migration 2 broke")

    monkeypatch.setattr(migrations, "MIGRATIONS", (*MIGRATIONS, Migration(LATEST + 1, "broken", broken)))
    monkeypatch.setattr(migrations, "LATEST", LATEST + 1)
    with pytest.raises(RuntimeError, match="migration 2 broke"):
        Store(tmp_path)
    assert (_version(tmp_path / "shipyard.db"), _schema(tmp_path / "shipyard.db"), _rows(tmp_path / "shipyard.db")) \
        == (0, schema, rows)


def test_a_store_from_a_newer_shipyard_is_refused_and_left_alone(tmp_path):
    path = Store(tmp_path).path
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={LATEST + 1}")
    db.execute("CREATE TABLE from_the_future (x)")
    db.commit()
    db.close()
    schema = _schema(path)
    with pytest.raises(StoreVersionError) as error:
        Store(tmp_path)
    assert str(path) in str(error.value)
    assert f"schema version {LATEST + 1}" in str(error.value) and f"up to {LATEST}" in str(error.value)
    assert (error.value.version, error.value.known) == (LATEST + 1, LATEST)
    assert (_version(path), _schema(path)) == (LATEST + 1, schema)
