"""What happens to a warm pool (store/pools.py) around its jobs: whether a job's end keeps it
(`keeps_pool`, SageMaker's rule), the keeper that holds its instances until it ends (`keep`), and the
reconciliation any reader runs so a pool whose keeper died is never shown as usable."""

from __future__ import annotations

import time

import psutil

from shipyard.spec.statuses import TERMINAL_STATUSES

KEEPER_POLL_SECONDS = 0.25
HEALTH_SECONDS = 1.0        # how often the keeper checks that its warm instances are alive
# A job on the pool that ended without handing it back (its controller died) gives the pool up after this.
ORPHAN_SECONDS = 3.0


def keeps_pool(ending: str, failure_reason: str | None) -> bool:
    """SageMaker keeps a warm pool after a job that completed, that was stopped once its instances were
    up, or that failed with the script's own (algorithm or client) error; not after a failure that may
    leave the instances unhealthy (a platform error). `ending`: the controller state the job ends from."""
    if ending in ("UPLOADING", "STOPPING"):
        return True
    return ending == "FAILING" and not (failure_reason or "").startswith("InternalServerError")


def _alive(pid: int | None, started: float | None) -> bool:
    if pid is None:
        return False
    try:
        process = psutil.Process(pid)
        if started is not None and abs(process.create_time() - started) > 1:
            return False
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def reconcile_pools(store) -> None:
    """A pool whose keeper died lost its instances with it (they die with their parent): Terminated."""
    from shipyard.store.pools import PoolStore

    pools = PoolStore(store)
    for pool in pools.list(include_terminated=False):
        if not _alive(pool.keeper_pid, pool.keeper_started):
            pools.terminate(pool.name, f"its keeper (the controller of job {pool.name}) is gone")


def abandon(store, job: str, reason: str) -> None:
    """The pool `job` runs on is no longer trusted (its job's controller died mid-run): Terminated."""
    from shipyard.store.pools import PoolStore

    pools = PoolStore(store)
    use = pools.use(job)
    if use is not None and pools.get(use["pool"]).job == job:
        pools.terminate(use["pool"], f"not kept: {reason}", only_if="InUse")


def claim(store, spec: dict):
    """A matching Available pool for the job whose spec fields (as stored: a controller claims before it
    loads pydantic) ask for a keep-alive, now InUse by it and said in its events and status; or None."""
    from shipyard.store.pools import PoolStore

    if not spec.get("keep_alive_period_in_seconds"):
        return None
    reconcile_pools(store)
    job, count = spec["job_name"], spec["instance_count"]
    pool = PoolStore(store).claim(job, instance_type=spec["instance_type"], instance_count=count,
                                  backend=spec["backend"], keep_alive=spec["keep_alive_period_in_seconds"])
    if pool is not None:
        store.add_event(job, "info", f"reusing warm pool {pool.name} (last used by {pool.job}): "
                        f"{count} of its {pool.instance_count} instance(s)")
        store.transition(job, "InProgress", "Starting", f"Reusing warm pool {pool.name}")
    return pool


def warm_start(store, spec, plans: list) -> tuple[str, list] | None:
    """At submit: claim a matching Available pool and send the job to its warm processes at once, so it
    starts while its controller boots (which adopts the connections). None: no pool to take (or one that
    proved dead, now Terminated); the job goes through the queue."""
    from shipyard.backends import get_backend
    from shipyard.store.pools import PoolStore

    # A Ray job is claimed by its controller, which connects to the cluster anyway.
    if not spec.keep_alive_period_in_seconds or spec.backend != "local" or any(p.warm is None for p in plans):
        return None
    pool = claim(store, spec.model_dump())
    if pool is None:
        return None
    pools = PoolStore(store)
    instances = []
    backend = get_backend(spec.backend, job_dir=store.job_dir(spec.job_name))
    try:
        for plan in plans:
            instances.append(backend.attach(plan, pool.name))
    except OSError as exc:   # closing the connections made ends the job on the members reached
        for instance in instances:
            instance.detach()
        pools.terminate(pool.name, f"warm instance unreachable when job {spec.job_name} claimed it: {exc}")
        store.add_event(spec.job_name, "warning", f"warm pool {pool.name} unreachable ({exc}); starting cold")
        return None
    return pool.name, instances


def keep(store, name: str, instances: list) -> None:
    """Be the pool's keeper until it ends: expire it, end it when a warm process died or the job on it
    ended without handing it back, then stop its instances."""
    from shipyard.store.pools import PoolStore

    pools = PoolStore(store)
    orphaned_since, checked = None, 0.0
    while True:
        pool = pools.get(name)
        if pool.status == "Terminated":
            break
        dead = []
        if time.monotonic() - checked >= HEALTH_SECONDS:   # a Ray member's check is a call to its node
            checked = time.monotonic()
            dead = [i.host for i in instances if not i.alive()]
        if dead:
            pools.terminate(name, f"warm instance {', '.join(dead)} died")
        elif pool.status == "Available" and time.time() >= pool.expires_at:
            pools.terminate(name, "keep-alive period ended", only_if="Available")
        elif pool.status == "InUse" and store.status(pool.job) in TERMINAL_STATUSES:
            orphaned_since = orphaned_since or time.monotonic()
            if time.monotonic() - orphaned_since > ORPHAN_SECONDS:
                pools.terminate(name, f"job {pool.job} ended without handing the pool back", only_if="InUse")
        else:
            orphaned_since = None
        time.sleep(KEEPER_POLL_SECONDS)
    for instance in instances:
        instance.release()
