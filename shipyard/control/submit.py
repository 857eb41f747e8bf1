"""Submitting a job: the one path `fit()`, `shipyard run` (through fit()) and the server take. What can
be checked is checked before anything is written: the name is free and the instances can be planned
here (CapacityError otherwise: a job that could never fit). Then the code is uploaded, the job recorded
and put in the capacity queue (store/queue.py, for a backend whose jobs share this machine), its instances
laid out and its controller started; a failure after the job is recorded leaves it Failed with the reason
(which also takes it out of the queue), never InProgress with no controller."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from shipyard.backends import REGISTRY
from shipyard.control.controller import spawn
from shipyard.control.planning import plan_job, write_plan
from shipyard.control.pools import warm_start
from shipyard.errors import ConflictError
from shipyard.spec.job import JobSpec
from shipyard.store.queue import CapacityQueue


def submit(store, spec: JobSpec, pack: Callable[[Path], Path] | None = None,
           progress: Callable[[int, int], None] | None = None, hand_off: bool = True) -> None:
    """Start `spec` as a new job. `pack(directory)` writes the job's sourcedir.tar.gz into `directory` and
    returns its path; it is uploaded to the job's source URI, `progress(done, total)` told the bytes sent
    as they go. Without it, the code must already be there. A job whose controller is to live on the
    cluster is handed to the cluster's home there (`hand_off`: but by the home itself)."""
    on_cluster = spec.controller == "cluster" and hand_off
    if on_cluster:
        from shipyard.control import cluster_home as home
    if store.exists(spec.job_name) or (on_cluster and home.has_job(spec.job_name)):
        raise ConflictError(f"a job named {spec.job_name!r} already exists; job names are unique")
    launches = plan_job(spec, store.job_dir(spec.job_name))
    if pack is not None:
        from shipyard.storage import transfer

        with tempfile.TemporaryDirectory(prefix="shipyard-source-") as tmp:
            transfer.upload_file(pack(Path(tmp)), spec.source_uri, progress)
    if on_cluster:   # recorded and controlled on the cluster's head, where this function runs again
        home.submit(spec.model_dump_json())
        return
    store.create_job(spec)
    _say_expected_cost(store, spec)
    try:
        write_plan(spec, store.job_dir(spec.job_name), launches)
        # A warm pool takes the job now; its controller adopts the connections (no queue: the pool's
        # capacity is held already).
        handoff = warm_start(store, spec, [launch.instance for launch in launches])
        if handoff is None and REGISTRY.load(spec.backend).queued:
            gpus = sum(len(launch.instance.config.gpu_ids) for launch in launches)
            CapacityQueue(store).enqueue(spec.job_name, len(launches), gpus)
        spawn(store, spec.job_name, handoff=handoff)
    except Exception as exc:
        store.update_job(spec.job_name, failure_reason=f"InternalServerError: {type(exc).__name__}: {exc}")
        store.transition(spec.job_name, "Failed", "Failed", "the job could not be started")
        raise


def _say_expected_cost(store, spec: JobSpec) -> None:
    """Before anything runs, what the job costs per hour (and what its budget buys), when it has a price."""
    from shipyard.control.billing import expectation, prices, rate

    priced = prices()
    if spec.max_cost is not None or rate(spec, priced) > 0:
        store.add_event(spec.job_name, "info", expectation(spec, priced))
