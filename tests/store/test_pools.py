"""Warm pools in the store (store/pools.py) and the rule that keeps one (control/pools.py): matching,
claiming in one transaction, the Reused/Available/Terminated states a job's WarmPoolStatus reads, and
the capacity a pool holds in the queue."""

from __future__ import annotations

import threading
import time

import pytest

from shipyard.control.pools import keeps_pool
from shipyard.errors import ConflictError, NotFoundError
from shipyard.store import Store
from shipyard.store.pools import PoolStore
from shipyard.store.queue import CapacityQueue


def _pool(pools: PoolStore, name: str = "a", count: int = 2, keep_alive: int = 60, instance_type: str = "local"):
    return pools.create(name, instance_type=instance_type, instance_count=count, backend="local",
                        keep_alive=keep_alive, keeper=(1, 0.0), members={}, preload=("torch",))


@pytest.fixture
def pools(tmp_path):
    return PoolStore(Store(tmp_path))


def _claim(pools, job, count=2, instance_type="local", keep_alive=30):
    return pools.claim(job, instance_type=instance_type, instance_count=count, backend="local", keep_alive=keep_alive)


def test_a_kept_pool_is_reused_by_a_matching_job(pools):
    _pool(pools)
    assert _claim(pools, "b") is None                  # InUse by its own job
    pools.keep("a")
    assert pools.warm_pool_status("a")["Status"] == "Available"
    assert _claim(pools, "other", instance_type="ml.m5.large") is None   # another type
    assert _claim(pools, "other", count=3) is None                         # more instances than it has
    claimed = _claim(pools, "b")
    assert (claimed.name, claimed.status, claimed.job) == ("a", "InUse", "b")
    assert pools.warm_pool_status("a") == {"Status": "Reused", "ResourceRetainedBillableTimeInSeconds": 0,
                                           "ReusedByJob": "b"}
    assert pools.warm_pool_status("b")["Status"] == "InUse"
    pools.keep("b")
    assert pools.get("a").expires_at == pytest.approx(time.time() + 30, abs=2)   # the new job's keep-alive


def test_fewer_instances_of_the_same_type_may_take_part_of_a_pool(pools):
    _pool(pools, count=4)
    pools.keep("a")
    assert _claim(pools, "small", count=1).name == "a"


def test_the_smallest_matching_pool_is_taken(pools):
    _pool(pools, "big", count=4)
    _pool(pools, "small", count=2)
    pools.keep("big")
    pools.keep("small")
    assert _claim(pools, "j", count=2).name == "small"


def test_two_jobs_racing_for_one_pool_one_gets_it(pools):
    _pool(pools)
    pools.keep("a")
    results = []
    barrier = threading.Barrier(8)

    def claim(job):
        barrier.wait()
        results.append(_claim(pools, job))

    threads = [threading.Thread(target=claim, args=(f"j{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(r is not None for r in results) == 1


def test_an_expired_pool_is_not_claimed_and_an_expiry_never_ends_a_claimed_one(pools):
    _pool(pools, keep_alive=0)
    pools.keep("a")                                   # expires at once
    assert _claim(pools, "late") is None
    _pool(pools, "b")
    pools.keep("b")
    assert _claim(pools, "first").name == "b"
    assert not pools.terminate("b", "keep-alive period ended", only_if="Available")   # the keeper came too late
    assert pools.get("b").status == "InUse"


def test_a_chained_pool_ends_at_its_maximum_lifetime_whatever_the_keep_alive(pools):
    from shipyard.store.pools import MAX_LIFETIME_SECONDS

    _pool(pools, keep_alive=21600)
    with pools.store._tx() as db:   # made 28 days less 100 s ago
        db.execute("UPDATE pools SET creation_time=? WHERE name='a'", (time.time() - MAX_LIFETIME_SECONDS + 100,))
    pools.keep("a")
    assert pools.get("a").expires_at == pytest.approx(time.time() + 100, abs=2)
    pools.update_keep_alive("a", 3600)
    assert pools.get("a").expires_at == pytest.approx(time.time() + 100, abs=2)


def test_release_and_update(pools):
    with pytest.raises(NotFoundError, match="no warm pool named 'x'"):
        pools.release("x")
    _pool(pools)
    with pytest.raises(ConflictError, match="in use by job 'a'.*jobs update a --keep-alive 0"):
        pools.release("a")
    pools.keep("a")
    pools.update_keep_alive("a", 600)
    assert pools.get("a").expires_at == pytest.approx(pools.use("a")["available_since"] + 600)
    pools.update_keep_alive("a", 0)
    assert pools.get("a").status == "Terminated"
    with pytest.raises(ConflictError, match="already Terminated"):
        pools.release("a")
    with pytest.raises(NotFoundError, match="has no warm pool"):
        pools.update_keep_alive("never", 10)


def test_retained_time_runs_from_the_end_of_the_job_until_the_pool_leaves_it(pools):
    _pool(pools)
    pools.keep("a")
    time.sleep(1.1)
    assert pools.warm_pool_status("a")["ResourceRetainedBillableTimeInSeconds"] >= 1
    pools.release("a")
    frozen = pools.warm_pool_status("a")
    time.sleep(1.1)
    assert pools.warm_pool_status("a") == frozen and frozen["Status"] == "Terminated"


def test_a_pool_holds_its_capacity_in_the_queue_until_it_ends(tmp_path):
    store = Store(tmp_path)
    queue = CapacityQueue(store)
    pools = PoolStore(store)
    with store._tx() as db:   # two jobs: "a" ended with its pool kept, "b" waits for 2 of 3 instances
        for name, status in (("a", "Completed"), ("b", "InProgress")):
            db.execute("INSERT INTO jobs (name, spec, status, secondary_status, creation_time, last_modified_time)"
                       " VALUES (?, '{}', ?, 'x', 0, 0)", (name, status))
    queue.enqueue("a", 2, 0)
    with store._tx() as db:
        db.execute("UPDATE queue SET granted='[]' WHERE job='a'")
    queue.enqueue("b", 2, 0)
    _pool(pools)
    pools.keep("a")
    assert queue.admit("b", 3, ()).__class__.__name__ == "Wait"
    pools.terminate("a", "released")
    assert queue.admit("b", 3, ()).__class__.__name__ == "Admit"


@pytest.mark.parametrize(("ending", "reason", "kept"), [
    ("UPLOADING", None, True),                                      # completed
    ("STOPPING", None, True),                                       # stopped once the instances were up
    ("FAILING", "AlgorithmError: algo-1: ExecuteUserScriptError", True),   # the user's own error
    ("FAILING", "InternalServerError: algo-1: the instance exited with code -9", False),   # maybe unhealthy
])
def test_when_a_pool_is_kept(ending, reason, kept):
    assert keeps_pool(ending, reason) is kept
