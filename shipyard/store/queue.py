"""The local backend's capacity queue: jobs whose instances share this machine wait here, first come first
served, until their instances (against `side_by_side`, backends/resources.py) and GPUs fit. A table beside
the jobs in the store's database, read with sqlite3 alone, so a waiting controller stays small and a job
admitted at once pays one transaction.

`admissions()` and `decision()` are the policy (pure: entries, limit and the machine's GPUs in, a decision
out); `CapacityQueue` is the SQL around them. A job holds what it was admitted with until it ends: across
its attempts (spot restarts, retries, a controller taking over), and released by its terminal status
itself, so a controller that dies or a submit that failed after recording the job never keeps capacity
held. Admitting is one write transaction, so two controllers never get the same capacity."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from shipyard.spec.statuses import TERMINAL_STATUSES


@dataclass(frozen=True)
class Entry:
    job: str
    instances: int
    gpus: int
    granted: tuple[str, ...] | None = None   # None while it waits
    # The job's controller, so a job waiting behind it can tell whether it is still alive (control/reconcile.py).
    controller_pid: int | None = None
    controller_started: float | None = None
    creation_time: float = 0.0


@dataclass(frozen=True)
class Admit:
    gpus: tuple[str, ...]   # the GPU ids its instances take


@dataclass(frozen=True)
class Wait:
    position: int           # among the waiting jobs; 1 is next
    instances: int          # what the job needs
    gpus: int
    in_use: int             # instances the admitted jobs hold
    limit: int
    gpus_in_use: int
    machine_gpus: int
    blockers: tuple[Entry, ...]   # what it waits behind: the admitted jobs and those ahead of it

    @property
    def message(self) -> str:
        needs = _count(self.instances, "instance")
        if self.gpus:
            needs += f" and {_count(self.gpus, 'GPU')}"
            use = (f"{self.in_use} of {self.limit} instances and {self.gpus_in_use} of {self.machine_gpus} GPUs "
                   "in use")
        else:
            use = f"{self.in_use} of {self.limit} in use"
        return f"Waiting for capacity: {ordinal(self.position)} in the queue; needs {needs}, {use}"


def admissions(entries: Sequence[Entry], limit: int, gpus: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The waiting jobs that may start now, each with the GPU ids it gets. `entries`: the live ones (jobs
    not ended) in submission order. Jobs are admitted in that order while each fits; the first that does
    not fit stops the line, so no job overtakes an earlier one."""
    held = [e for e in entries if e.granted is not None]
    room = limit - sum(e.instances for e in held)
    taken = {gpu for e in held for gpu in e.granted}
    free = [gpu for gpu in gpus if gpu not in taken]
    admitted = {}
    for entry in (e for e in entries if e.granted is None):
        # Alone, a job larger than the limit runs rather than block the queue for ever: it fitted when it
        # was submitted, and the limit was lowered since.
        alone = not held and not admitted
        if (entry.instances > room and not alone) or entry.gpus > len(free):
            break
        admitted[entry.job] = tuple(free[:entry.gpus])
        room, free = room - entry.instances, free[entry.gpus:]
    return admitted


def decision(entries: Sequence[Entry], job: str, limit: int, gpus: Sequence[str]) -> Admit | Wait:
    """What `job` does, once `admissions()` has been applied to `entries`."""
    mine = next(e for e in entries if e.job == job)
    if mine.granted is not None:
        return Admit(mine.granted)
    held = tuple(e for e in entries if e.granted is not None)
    waiting = [e for e in entries if e.granted is None]
    position = waiting.index(mine) + 1
    return Wait(position=position, instances=mine.instances, gpus=mine.gpus, in_use=sum(e.instances for e in held),
                limit=limit, gpus_in_use=sum(len(e.granted) for e in held), machine_gpus=len(gpus),
                blockers=held + tuple(waiting[:position - 1]))


class CapacityQueue:
    """The queue table of a Store (shipyard/store/db.py; declared in store/migrations.py)."""

    def __init__(self, store) -> None:
        self.store = store

    def enqueue(self, job: str, instances: int, gpus: int) -> None:
        """Put a recorded job at the end of the queue (the submitting client, before its controller starts)."""
        with self.store._tx() as db:
            db.execute("INSERT INTO queue (job, instances, gpus) VALUES (?, ?, ?)", (job, instances, gpus))

    def admit(self, job: str, limit: int, gpus: Sequence[str]) -> Admit | Wait | None:
        """Admit whoever fits now, in order, and say what `job` does: start (with the GPU ids it holds, the
        same on every call until it ends) or wait. None: the job is not queued (another backend)."""
        with self.store._tx() as db:
            rows = db.execute(
                "SELECT q.job, q.instances, q.gpus, q.granted, j.controller_pid, j.controller_started,"
                " j.creation_time, j.status, p.status FROM queue q LEFT JOIN jobs j ON j.name = q.job"
                " LEFT JOIN pools p ON p.name = q.job ORDER BY q.seq"
            ).fetchall()
            # A job that ended keeps its capacity while the warm pool it started lives (store/pools.py).
            ended = [row[0] for row in rows if (row[7] is None or row[7] in TERMINAL_STATUSES)
                     and row[8] in (None, "Terminated")]
            # Ended jobs' entries go: their capacity was released when they ended; this keeps the table short.
            db.executemany("DELETE FROM queue WHERE job=?", [(name,) for name in ended])
            entries = [_entry(row) for row in rows if row[0] not in ended]
            if not any(e.job == job for e in entries):
                return None
            admitted = admissions(entries, limit, gpus)
            now = time.time()
            db.executemany("UPDATE queue SET granted=?, admitted_time=? WHERE job=?",
                           [(json.dumps(list(ids)), now, name) for name, ids in admitted.items()])
        entries = [replace(e, granted=admitted[e.job]) if e.job in admitted else e for e in entries]
        return decision(entries, job, limit, gpus)

    def leave(self, job: str) -> None:
        """`job` runs on a warm pool, whose capacity is held already."""
        with self.store._tx() as db:
            db.execute("DELETE FROM queue WHERE job=?", (job,))

    def waiting(self) -> list[str]:
        """The jobs waiting for capacity, first in line first."""
        with self.store._tx() as db:
            rows = db.execute(
                "SELECT q.job FROM queue q JOIN jobs j ON j.name = q.job WHERE q.granted IS NULL AND j.status"
                f" NOT IN ({', '.join('?' * len(TERMINAL_STATUSES))}) ORDER BY q.seq", tuple(TERMINAL_STATUSES),
            ).fetchall()
        return [row[0] for row in rows]


def _entry(row: tuple) -> Entry:
    job, instances, gpus, granted, pid, started, created, _status, _pool = row
    return Entry(job, instances, gpus, None if granted is None else tuple(json.loads(granted)), pid, started, created)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, ..., 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
