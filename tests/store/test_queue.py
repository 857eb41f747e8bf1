"""The capacity queue: the policy on its own (who is admitted, in what order, with which GPUs), then the
table around it: what holds capacity and what releases it, and many processes admitting at once."""

from __future__ import annotations

import multiprocessing

import pytest

from shipyard.spec.job import JobSpec
from shipyard.store import Store
from shipyard.store.queue import Admit, CapacityQueue, Entry, Wait, admissions, decision, ordinal

GPUS = ("0", "1", "2", "3")


def test_jobs_are_admitted_in_order_while_they_fit_and_none_overtakes_one_that_does_not():
    entries = [Entry("a", 2, 0), Entry("b", 3, 0), Entry("c", 1, 0)]
    assert admissions(entries, limit=4, gpus=()) == {"a": ()}   # c would fit, but b is ahead of it
    assert admissions(entries, limit=6, gpus=()) == {"a": (), "b": (), "c": ()}
    assert admissions([Entry("x", 4, 0, granted=()), *entries], limit=4, gpus=()) == {}
    # The limit was lowered below a job submitted under the old one: alone, it runs; it never waits for ever.
    assert admissions([Entry("big", 6, 0), Entry("d", 1, 0)], limit=4, gpus=()) == {"big": ()}


def test_gpus_are_handed_out_disjointly_from_the_free_ones():
    entries = [Entry("held", 1, 1, granted=("0",)), Entry("a", 1, 2), Entry("b", 1, 1), Entry("c", 1, 1)]
    assert admissions(entries, limit=8, gpus=GPUS) == {"a": ("1", "2"), "b": ("3",)}   # c: no GPU left
    assert admissions([Entry("a", 1, 5)], limit=8, gpus=GPUS) == {}


def test_a_waiting_job_is_told_its_place_and_what_it_waits_for():
    held, ahead = Entry("held", 4, 1, granted=("0",)), Entry("ahead", 2, 0)
    entries = [held, ahead, Entry("job", 2, 0)]
    wait = decision(entries, "job", limit=4, gpus=())
    assert wait.message == "Waiting for capacity: 2nd in the queue; needs 2 instances, 4 of 4 in use"
    assert wait.blockers == (held, ahead)
    gpu_wait = decision([held, Entry("job", 1, 4)], "job", limit=8, gpus=GPUS)
    assert gpu_wait.message == ("Waiting for capacity: 1st in the queue; needs 1 instance and 4 GPUs, "
                                "4 of 8 instances and 1 of 4 GPUs in use")
    assert decision(entries, "held", limit=4, gpus=()) == Admit(("0",))


def test_ordinals():
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"]


# -- the table -------------------------------------------------------------------------------------
def _job(store: Store, name: str, instances: int = 1, gpus: int = 0) -> None:
    store.create_job(JobSpec(job_name=name, instance_count=instances, output_path="file:///out",
                             hyperparameters={"sagemaker_program": '"t.py"'}))
    CapacityQueue(store).enqueue(name, instances, gpus)


def test_capacity_is_held_across_calls_until_the_job_ends_whatever_its_status(tmp_path):
    store = Store(tmp_path)
    queue = CapacityQueue(store)
    for name in ("a", "b", "c"):
        _job(store, name, instances=2, gpus=1)
    assert queue.admit("b", 4, GPUS[:2]) == Admit(("1",))   # b's call admits a too, first in line
    assert queue.admit("a", 4, GPUS[:2]) == Admit(("0",))
    assert isinstance(queue.admit("c", 4, GPUS[:2]), Wait) and queue.waiting() == ["c"]
    assert queue.admit("b", 4, GPUS[:2]) == Admit(("1",))   # a new attempt, a controller taking over: the same
    store.transition("a", "Stopped", "Stopped")
    assert queue.admit("c", 4, GPUS[:2]) == Admit(("0",))
    assert queue.waiting() == [] and queue.admit("not-queued", 4, ()) is None


def test_a_job_that_ended_before_it_was_admitted_neither_waits_nor_blocks(tmp_path):
    store = Store(tmp_path)
    queue = CapacityQueue(store)
    _job(store, "failed-submit", instances=2)
    _job(store, "next", instances=2)
    store.transition("failed-submit", "Failed", "Failed", "the job could not be started")
    assert queue.waiting() == ["next"]
    assert queue.admit("next", 2, ()) == Admit(())


def _admit_until_decided(home: str, names: list[str], results) -> None:
    queue = CapacityQueue(Store(home))
    for name in names:
        decided = queue.admit(name, 3, GPUS[:3])
        results.put((name, decided.gpus if isinstance(decided, Admit) else None))


def test_processes_admitting_at_once_never_share_capacity(tmp_path):
    store = Store(tmp_path)
    names = [f"job-{i}" for i in range(12)]
    for name in names:
        _job(store, name, gpus=1)
    results = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_admit_until_decided, args=(str(tmp_path), names[i::4] * 5, results))
             for i in range(4)]
    for proc in procs:
        proc.start()
    decided = [results.get(timeout=60) for _ in range(len(names) * 5)]
    for proc in procs:
        proc.join(60)
    admitted = {name: gpus for name, gpus in decided if gpus is not None}
    assert sorted(admitted) == names[:3]   # the first three in line, each always told the same GPU
    assert sorted(gpu for gpus in admitted.values() for gpu in gpus) == ["0", "1", "2"]
    assert len({(name, gpus) for name, gpus in decided if gpus is not None}) == 3


@pytest.mark.parametrize("status", ["Completed", "Failed", "Stopped"])
def test_every_terminal_status_releases(tmp_path, status):
    store = Store(tmp_path)
    queue = CapacityQueue(store)
    _job(store, "a", instances=3)
    _job(store, "b", instances=3)
    assert queue.admit("a", 4, ()) == Admit(()) and isinstance(queue.admit("b", 4, ()), Wait)
    store.transition("a", status, status)
    assert queue.admit("b", 4, ()) == Admit(())
