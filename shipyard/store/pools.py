"""Warm pools in the store: instances kept alive after a job for the next matching one (SageMaker's
warm pools, `../shared/spec/sagemaker-features.md` D.2; docs/warm-pools.md).

A pool is named after the job that started its instances; that job's controller is the pool's keeper
(the instances' parent), and it lives on after its job until the pool is Terminated. `pools` holds each
pool's state (InUse, Available, Terminated), `pool_uses` each job's time on one, from which a job's
WarmPoolStatus is read: InUse while it runs, Available once it ended with the pool kept, Reused when a
later job took it (ReusedByJob), Terminated when it expired or was released. Claiming a pool is one
write transaction, so two jobs never get the same one; a pool's capacity stays held in the queue
(store/queue.py) until it is Terminated."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from shipyard.errors import ConflictError, NotFoundError, closest

# A pool chained from job to job ends this long after it was made, whatever the keep-alives (SageMaker's
# current limit; the 2023 docs said 7 days).
MAX_LIFETIME_SECONDS = 28 * 86400


@dataclass(frozen=True)
class Pool:
    name: str
    instance_type: str
    instance_count: int
    backend: str
    status: str
    job: str
    expires_at: float | None
    keeper_pid: int | None
    keeper_started: float | None
    members: dict[str, dict] = field(default_factory=dict)
    preload: tuple[str, ...] = ()
    creation_time: float = 0.0
    end_time: float | None = None
    end_reason: str | None = None


_COLUMNS = ("name, instance_type, instance_count, backend, status, job, expires_at, keeper_pid, keeper_started, "
            "members, preload, creation_time, end_time, end_reason")


def _pool(row: tuple) -> Pool:
    values = list(row)
    values[9], values[10] = json.loads(values[9]), tuple(json.loads(values[10]))
    return Pool(*values)


def matches(pool: Pool, instance_type: str, instance_count: int, backend: str) -> bool:
    """SageMaker reuses a pool only for the same type and count; here a job may also take fewer of the
    same type: its hosts are the pool's first ones (the others stay idle in the pool)."""
    return (pool.instance_type == instance_type and pool.backend == backend
            and instance_count <= pool.instance_count)


class PoolStore:
    """The pool tables of a Store (shipyard/store/db.py; declared in store/migrations.py)."""

    def __init__(self, store) -> None:
        self.store = store

    def create(self, name: str, *, instance_type: str, instance_count: int, backend: str, keep_alive: int,
               keeper: tuple[int, float], members: dict[str, dict], preload: tuple[str, ...]) -> Pool:
        """The job `name` starts a pool on its own instances, InUse by itself."""
        now = time.time()
        with self.store._tx() as db:
            db.execute(f"INSERT INTO pools ({_COLUMNS}) VALUES "
                       "(?, ?, ?, ?, 'InUse', ?, NULL, ?, ?, ?, ?, ?, NULL, NULL)",
                       (name, instance_type, instance_count, backend, name, *keeper, json.dumps(members),
                        json.dumps(list(preload)), now))
            db.execute("INSERT INTO pool_uses (job, pool, keep_alive) VALUES (?, ?, ?)", (name, name, keep_alive))
        return self.get(name)

    def set_members(self, name: str, members: dict[str, dict]) -> None:
        """What the pool's instances are, for the next job (a Ray member's node address) and for people."""
        with self.store._tx() as db:
            db.execute("UPDATE pools SET members=? WHERE name=?", (json.dumps(members), name))

    def get(self, name: str) -> Pool:
        with self.store._read() as db:
            row = db.execute(f"SELECT {_COLUMNS} FROM pools WHERE name=?", (name,)).fetchone()
            names = [] if row else [r[0] for r in db.execute("SELECT name FROM pools")]
        if row is None:
            raise NotFoundError(f"no warm pool named {name!r}{closest(name, names)}; `shipyard pools list` shows them")
        return _pool(row)

    def list(self, include_terminated: bool = True) -> list[Pool]:
        with self.store._read() as db:
            rows = db.execute(f"SELECT {_COLUMNS} FROM pools ORDER BY creation_time").fetchall()
        pools = [_pool(r) for r in rows]
        return pools if include_terminated else [p for p in pools if p.status != "Terminated"]

    def claim(self, job: str, *, instance_type: str, instance_count: int, backend: str, keep_alive: int) -> Pool | None:
        """Give `job` an Available pool that matches (the smallest, then the one expiring first), or None.
        The job it was kept for becomes Reused."""
        now = time.time()
        with self.store._tx() as db:
            rows = db.execute(f"SELECT {_COLUMNS} FROM pools WHERE status='Available' AND expires_at > ?",
                              (now,)).fetchall()
            candidates = sorted((p for p in map(_pool, rows) if matches(p, instance_type, instance_count, backend)),
                                key=lambda p: (p.instance_count, p.expires_at))
            if not candidates:
                return None
            pool = candidates[0]
            db.execute("UPDATE pools SET status='InUse', job=?, expires_at=NULL WHERE name=?", (job, pool.name))
            db.execute("UPDATE pool_uses SET released_at=?, reused_by=? WHERE job=?", (now, job, pool.job))
            db.execute("INSERT INTO pool_uses (job, pool, keep_alive) VALUES (?, ?, ?)", (job, pool.name, keep_alive))
        return self.get(pool.name)

    def keep(self, job: str) -> Pool:
        """`job` ended with its pool kept: Available for the job's keep-alive period."""
        now = time.time()
        with self.store._tx() as db:
            pool, keep_alive = db.execute("SELECT pool, keep_alive FROM pool_uses WHERE job=?", (job,)).fetchone()
            db.execute("UPDATE pools SET status='Available', expires_at=MIN(?, creation_time + ?) "
                       "WHERE name=? AND job=? AND status='InUse'", (now + keep_alive, MAX_LIFETIME_SECONDS, pool, job))
            db.execute("UPDATE pool_uses SET available_since=? WHERE job=?", (now, job))
        return self.get(pool)

    def terminate(self, name: str, reason: str, *, only_if: str | None = None) -> bool:
        """End the pool (its keeper then stops its instances). `only_if`: only from that status (an expiry
        must not end a pool a job has just claimed). False when nothing changed."""
        now = time.time()
        with self.store._tx() as db:
            condition = " AND status=?" if only_if else " AND status != 'Terminated'"
            changed = db.execute(f"UPDATE pools SET status='Terminated', end_time=?, end_reason=?, expires_at=NULL "
                                 f"WHERE name=?{condition}", (now, reason, name, *([only_if] if only_if else [])))
            if changed.rowcount:
                db.execute("UPDATE pool_uses SET released_at=? WHERE pool=? AND released_at IS NULL "
                           "AND available_since IS NOT NULL", (now, name))
        return bool(changed.rowcount)

    def release(self, name: str) -> Pool:
        """A user's release: only an Available pool (one in use ends with its job's keep-alive 0)."""
        pool = self.get(name)
        if pool.status == "InUse":
            raise ConflictError(f"warm pool {name!r} is in use by job {pool.job!r}; release it when that job has "
                                "ended, or give the job keep-alive 0: "
                                f"`shipyard jobs update {pool.job} --keep-alive 0`")
        if pool.status == "Terminated":
            raise ConflictError(f"warm pool {name!r} is already Terminated ({pool.end_reason})")
        self.terminate(name, "Released by the user", only_if="Available")
        return self.get(name)

    def update_keep_alive(self, job: str, seconds: int) -> Pool:
        """UpdateTrainingJob's KeepAlivePeriodInSeconds: a new period counted from when the job ended (0
        releases the pool). The job must be the one its pool was last kept for."""
        use = self.use(job)
        if use is None:
            raise NotFoundError(f"job {job!r} has no warm pool (it ran without keep_alive_period_in_seconds)")
        pool = self.get(use["pool"])
        with self.store._tx() as db:
            db.execute("UPDATE pool_uses SET keep_alive=? WHERE job=?", (seconds, job))
        if pool.job != job or pool.status == "Terminated":
            if pool.job != job:
                raise ConflictError(f"job {job!r}'s warm pool was reused by {use['reused_by']!r}; update that job")
            raise ConflictError(f"job {job!r}'s warm pool is already Terminated ({pool.end_reason})")
        if pool.status == "Available":
            if seconds == 0:
                self.terminate(pool.name, "Released by the user (keep-alive 0)", only_if="Available")
            else:
                with self.store._tx() as db:
                    db.execute("UPDATE pools SET expires_at=MIN(?, creation_time + ?) WHERE name=? "
                               "AND status='Available'", (use["available_since"] + seconds, MAX_LIFETIME_SECONDS,
                                                          pool.name))
        return self.get(pool.name)

    def use(self, job: str) -> dict | None:
        with self.store._read() as db:
            row = db.execute("SELECT job, pool, keep_alive, available_since, released_at, reused_by FROM pool_uses "
                             "WHERE job=?", (job,)).fetchone()
        return None if row is None else dict(zip(("job", "pool", "keep_alive", "available_since", "released_at",
                                                  "reused_by"), row, strict=True))

    def warm_pool_status(self, job: str, now: float | None = None) -> dict | None:
        """DescribeTrainingJob's WarmPoolStatus for `job`, None when it asked for no pool."""
        use = self.use(job)
        if use is None:
            return None
        pool = self.get(use["pool"])
        if use["reused_by"]:
            status = "Reused"
        elif pool.job == job:
            status = pool.status
        else:   # its pool was never kept for it (it failed) and has moved on or ended
            status = "Terminated"
        retained = 0.0
        if use["available_since"] is not None:
            until = use["released_at"] or pool.end_time or (now or time.time())
            retained = max(0.0, until - use["available_since"])
        status_block = {"Status": status, "ResourceRetainedBillableTimeInSeconds": int(retained)}
        if use["reused_by"]:
            status_block["ReusedByJob"] = use["reused_by"]
        return status_block
