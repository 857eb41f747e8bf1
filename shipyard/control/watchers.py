"""Watchers run beside a job inside its controller: debugger rules, profiler rules, and whatever else
must look at a job while it trains. Each kind is a function registered by name in REGISTRY that
`create(spec, job_dir, store)` returns a Watcher, or None when the job does not ask for it, so a job
with no rules pays nothing. A watcher records what it finds itself (rule statuses in the store); the
controller only polls it and stops the job when it asks."""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from shipyard.registry import Registry

# imported only for jobs that get that far.
REGISTRY = Registry("watchers", "watcher", {
    "debugger_rules": "shipyard.rules.debugger.watcher:create",
    "profiler_rules": "shipyard.rules.profiler.watcher:create",
})


@dataclass(frozen=True)
class StopRequest:
    """A rule's StopTraining action: the job ends Stopped with this message."""

    message: str


class Watcher(Protocol):
    name: str

    def poll(self) -> StopRequest | None:
        """Look at what is new (called every few seconds while instances run); must be quick."""

    def finish(self) -> StopRequest | None:
        """The instances have ended: a last look at everything, then final statuses; a StopTraining that
        fires in this last look is returned, for the controller to say that it came too late."""

    def follow(self, spec) -> None:
        """The job's spec was updated while it runs (UpdateTrainingJob: its profiling and profiler rules)."""


def start_watchers(spec, job_dir: Path, store) -> list[Watcher]:
    watchers = []
    for name in REGISTRY:
        watcher = REGISTRY.load(name)(spec, job_dir, store)
        if watcher is not None:
            watchers.append(watcher)
    return watchers


def follow_all(watchers: list[Watcher], spec, job_dir: Path, store) -> None:
    """The job's spec was updated while it runs: each watcher follows it, and a kind that was not running
    (its job asked for none of it) starts when the new spec asks for it."""
    for watcher in watchers:
        watcher.follow(spec)
    running = {type(w).__module__ for w in watchers}
    for name in REGISTRY:
        if REGISTRY[name].partition(":")[0] not in running:
            watcher = REGISTRY.load(name)(spec, job_dir, store)
            if watcher is not None:
                watchers.append(watcher)


def poll_all(watchers: list[Watcher], store, job: str) -> StopRequest | None:
    """A watcher that raises is reported and dropped; it never takes the job down."""
    for watcher in list(watchers):
        try:
            request = watcher.poll()
        except Exception:
            watchers.remove(watcher)
            store.add_event(job, "warning", f"{watcher.name} stopped watching: {traceback.format_exc(limit=3)}")
            continue
        if request is not None:
            return request
    return None


def finish_all(watchers: list[Watcher], store, job: str) -> StopRequest | None:
    """Every watcher's last look; the first StopTraining that fired in it."""
    late = None
    for watcher in watchers:
        try:
            request = watcher.finish()
            late = late or request
        except Exception:
            store.add_event(job, "warning", f"{watcher.name} could not finish: {traceback.format_exc(limit=3)}")
    return late
