"""A tuning job's life outside its process: submitting it (checks first, then the code uploaded once
for every trial, the record, the detached tuning process), stopping it, and noticing a tuning process
that died. A dead tuning process is replaced by one that continues the search (its state is all in the
store and the study); one that keeps dying (MAX_RESTARTS) leaves the tuning job Failed, its running
trials stopped, never a tuning job InProgress that nothing drives."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from shipyard.errors import ConflictError, ValidationError
from shipyard.spec.tuning import TuningSpec
from shipyard.store.tuning import TuningRecord, TuningStore

MAX_RESTARTS = 3  # tuning processes that died before a tuning job is left Failed (a bug, not bad luck)


def check_warm_start(tuning: TuningStore, spec: TuningSpec) -> None:
    """C.5's restrictions on parents, before anything is written."""
    if spec.warm_start is None:
        return
    ours = {(d.name, r.name): r.kind for d in spec.definitions for r in d.hyperparameter_ranges}
    objectives = sorted((d.name or "", d.objective_metric_name) for d in spec.definitions)
    for parent in spec.warm_start.parents:
        field = f"warm_start_config.parents[{parent!r}]"
        if not tuning.exists(parent):
            tuning.get(parent)  # NotFoundError, with the closest name
        record = reconcile(tuning, parent)
        theirs = record.spec
        if not record.terminal:
            raise ValidationError(field, record.status, "a warm-start parent must have ended (Completed, Stopped "
                                  "or Failed); wait for it or stop it")
        their_objectives = sorted((d.name or "", d.objective_metric_name) for d in theirs.definitions)
        if (their_objectives, theirs.objective_type) != (objectives, spec.objective_type):
            raise ValidationError(field, f"{theirs.objective_type} {_names(their_objectives)}", "a parent must have "
                                  f"the same objective ({spec.objective_type} {_names(objectives)})")
        changed = sorted(r.name for d in theirs.definitions for r in d.hyperparameter_ranges
                         if ours.get((d.name, r.name), r.kind) != r.kind)
        if changed:
            raise ValidationError(field, changed, "a hyperparameter's type (continuous, integer, categorical) "
                                  "cannot change from a parent's; give it the parent's type")


def _names(objectives: list[tuple[str, str]]) -> str:
    return ", ".join(f"{name}: {metric}" if name else metric for name, metric in objectives)


def submit(store, spec: TuningSpec, packs: dict[str | None, Callable[[Path], Path]] | None = None) -> TuningRecord:
    """Start `spec` as a new tuning job. `packs[definition](directory)` writes its sourcedir.tar.gz,
    uploaded once to the source URI every trial of that definition runs from."""
    tuning = TuningStore(store)
    if tuning.exists(spec.tuning_job_name):
        raise ConflictError(f"a tuning job named {spec.tuning_job_name!r} already exists; pick another name")
    check_warm_start(tuning, spec)
    from shipyard.control.planning import plan_job

    for definition in spec.definitions:  # every trial's instances can be had here
        plan_job(definition.training, store.job_dir(spec.tuning_job_name))
    from shipyard.storage import transfer

    for definition in spec.definitions if packs else ():
        if definition.training.algorithm is not None:   # a built-in algorithm's image has no code to upload
            continue
        with tempfile.TemporaryDirectory(prefix="shipyard-source-") as tmp:
            transfer.upload_file(packs[definition.name](Path(tmp)), definition.training.source_uri)
    tuning.create(spec)
    try:
        spawn(tuning, spec.tuning_job_name)
    except Exception as exc:
        tuning.set_status(spec.tuning_job_name, "Failed", end_time=time.time(),
                          failure_reason=f"InternalServerError: {type(exc).__name__}: {exc}")
        raise
    return tuning.get(spec.tuning_job_name)


def spawn(tuning: TuningStore, name: str) -> int:
    """The tuning process, detached, its output in the tuning job's directory."""
    from shipyard.control.controller import detached
    from shipyard.tuning.controller import study_path

    pid, started = detached(["shipyard.tuning.controller", name], study_path(tuning.store, name).parent / "tuning.log",
                            tuning.store.home)
    tuning.update(name, controller_pid=pid, controller_started=started)
    return pid


def stop(tuning: TuningStore, name: str) -> bool:
    """StopHyperParameterTuningJob: the tuning process stops every running trial, then ends Stopped."""
    reconcile(tuning, name)
    return tuning.request_stop(name)


def reconcile(tuning: TuningStore, name: str) -> TuningRecord:
    from shipyard.control.reconcile import controller_alive, decider

    record = tuning.get(name)
    if record.terminal or controller_alive(record):
        return record
    from shipyard.tuning.controller import study_path

    with decider(study_path(tuning.store, name).parent) as deciding:
        record = tuning.get(name)
        if deciding and not record.terminal and not controller_alive(record):
            _take_over(tuning, record)
    return tuning.get(name)


def _take_over(tuning: TuningStore, record: TuningRecord) -> None:
    from shipyard.store.tuning import events_key

    store, name = tuning.store, record.name
    died = f"the tuning process (pid {record.controller_pid}) stopped"
    if record.restarts >= MAX_RESTARTS:
        reason = (f"InternalServerError: {died} {record.restarts + 1} times; its log is "
                  f"{tuning.directory(name) / 'tuning.log'}")
        for trial in tuning.trials(name):
            if trial.state != "ended" and store.exists(trial.job):
                store.request_stop(trial.job, "the tuning job failed")
        tuning.set_status(name, "Failed", end_time=time.time(), failure_reason=reason)
        return
    store.add_event(events_key(name), "warning", f"{died}; a new one continues the tuning job")
    tuning.update(name, restarts=record.restarts + 1)
    spawn(tuning, name)

