"""The job controller: `python -m shipyard.control.controller JOB`, one detached process per job, so a
job keeps running when the client that submitted it exits. It is a state machine stepped one transition
at a time (`step()`), its states and their transitions named once in TRANSITIONS:

    QUEUED -> RUNNING                                   its instances fit on this machine (store/queue.py)
           -> STOPPED                                   stopped while it waited: no instance, no attempt
    RUNNING -> UPLOADING -> COMPLETED                   every instance exited 0
            -> FAILING -> FAILED                         the script failed, a hang, a platform failure
            -> STOPPING -> STOPPED                       stop, a rule's StopTraining, max_run, max_wait
            -> INTERRUPTED -> RESTARTING -> RUNNING      spot capacity went, and came back in time
            -> RESTARTING -> RUNNING                     a platform failure with retries left

While RUNNING, policies look at the attempt and return a decision (decisions.py; failures.py classifies
a failed instance, policies.py the clock, the spot simulator and hangs, watchers.py the rules); the
controller acts on it. Every transition the user sees (SageMaker's statuses) is recorded in the store,
agent events become statuses, log lines become metrics, and the job ends in a true state whatever
happens (an exception here is a Failed job with the reason, never a job left InProgress)."""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import os
import secrets
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from shipyard.control.decisions import Complete, Decision, Fail, Interrupt, Retry, Stop
from shipyard.runtime.mpi import SECRET_ENV
from shipyard.settings import shipyard_home

POLL_SECONDS = 0.1
WARM_FLAG = "--warm="       # the pool and connections a job was sent on at submit (control/pools.py)
CONTROLLER_ENVIRONMENT = "controller.env.json"   # in the job's directory: write_controller_environment
QUEUE_POLL_SECONDS = 0.3    # how often a job waiting for capacity asks again
LIVENESS_SECONDS = 2.0      # how often it checks that the jobs it waits behind still have a controller
# When one instance failed, the others are usually stuck in a collective: give them little time.
FAILURE_GRACE_SECONDS = 10.0
# An instance whose error only says a peer went away failed because another one did (its collective
# broke): the controller waits this long for the instance that failed for a reason of its own.
CAUSE_WAIT_SECONDS = 2.0
HANG_CHECK_SECONDS = 2.0
BUDGET_MARGIN_SECONDS = 1.0  # with max_cost: a poll and the instances' exit, besides the stop's grace
WATCH_SECONDS = 2.0         # how often rules (control/watchers.py) look at what is new


class State(enum.Enum):
    QUEUED = "queued"              # waiting for this machine's capacity; each step asks the queue once
    RUNNING = "running"            # an attempt's instances run; each step polls them once
    INTERRUPTED = "interrupted"    # spot capacity went; waiting for it to come back
    RESTARTING = "restarting"      # starting the next attempt
    UPLOADING = "uploading"
    FAILING = "failing"
    STOPPING = "stopping"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def terminal(self) -> bool:
        return not TRANSITIONS[self]


TRANSITIONS: dict[State, frozenset[State]] = {
    State.QUEUED: frozenset({State.QUEUED, State.RUNNING, State.STOPPED}),
    State.RUNNING: frozenset({State.RUNNING, State.UPLOADING, State.FAILING, State.STOPPING,
                              State.INTERRUPTED, State.RESTARTING}),
    State.INTERRUPTED: frozenset({State.INTERRUPTED, State.RESTARTING, State.STOPPING}),
    State.RESTARTING: frozenset({State.RUNNING}),
    State.UPLOADING: frozenset({State.COMPLETED}),
    State.FAILING: frozenset({State.FAILED}),
    State.STOPPING: frozenset({State.STOPPED}),
    State.COMPLETED: frozenset(),
    State.FAILED: frozenset(),
    State.STOPPED: frozenset(),
}
# How long run() waits before the next step from each state (the others step on at once).
# The job's record's field for each of its tarballs.
ARTIFACT_FIELDS = {"model.tar.gz": "model_artifacts", "output.tar.gz": "output_artifacts"}
PAUSES = {State.QUEUED: QUEUE_POLL_SECONDS, State.RUNNING: POLL_SECONDS, State.INTERRUPTED: POLL_SECONDS}


class JobController:
    """Runs the plan the submitting client wrote (control/planning.py), once the capacity queue admits the
    job (re-planned if it had to wait: the ports chosen at submit may be taken by then). While it waits
    it loads nothing heavy (no pydantic); the metric machinery loads while the instances boot.

    A job is one or more attempts: a spot interruption or a platform failure with retries left ends
    the attempt and, capacity and `max_wait` permitting, starts the next with fresh instances whose
    checkpoints are restored from `checkpoint_s3_uri`. `backend` replaces the plan's own (tests drive
    the controller against a fake one)."""

    def __init__(self, home: Path, name: str, continuing: bool = False, backend=None) -> None:
        self.home, self.name = home, name
        self.continuing = continuing   # a new controller taking over a job whose controller died
        self.backend = backend
        self.job_dir = home / "jobs" / name
        self.store = None
        self.state = State.QUEUED
        self.queue = None
        self.detected = None     # this machine, whose capacity the queue shares out
        self.machine = None      # what the instances are planned on: this machine, the GPUs the queue handed out
        self.queued_since: float | None = None   # set when the job had to wait
        self.queue_message = ""
        self.last_liveness = 0.0
        self.instances: list = []
        self.started_by = None   # the backend that started the instances
        self.scrapers: list = []
        self.readers: dict = {}
        self.attempt = 1
        self.run_seconds = 0.0    # running time of the attempts before this one (max_run covers them all)
        self.log_offsets: dict[str, int] = {}   # where a controller taking over starts reading host logs
        self.watchers: list = []
        self.cost_rate = 0.0         # USD per second of running, when the job has a budget (max_cost)
        self.spec_version = 0        # the spec's updates passed on to the instances (_follow_updates)
        self.last_update_check = 0.0
        self.ending: Decision | None = None   # what ends the job (FAILING, STOPPING)
        self.restart_message = ""
        self.pool: str | None = None   # the warm pool the job runs on: one it claimed, or its own
        self.claimed = False       # the pool was another job's: its instances are attached, not started
        self.adopted: dict[str, int] = {}   # host -> inherited connection to its warm process (`adopt`)

    # -- the whole lifecycle ------------------------------------------------------------------
    def run(self) -> None:
        try:
            while not self.state.terminal:
                time.sleep(PAUSES.get(self.step(), 0))
        except Exception as exc:
            self._open_store()
            self.store.add_event(self.name, "error", traceback.format_exc())
            self._kill_all()
            self._finish("Failed", "Failed", f"InternalServerError: {type(exc).__name__}: {exc}")
        finally:
            self._kill_all()

    def start(self) -> None:
        """Start the first attempt's instances (or, taking over, the next attempt's)."""
        from shipyard.control import PLAN_FILE

        self._open_store()
        if self.continuing:
            self._start_instances(self._take_over())
        else:
            plan = json.loads((self.job_dir / PLAN_FILE).read_text())
            self._start_instances(self._plan_attempt()[0] if self._stale(plan) else plan)
        # Only now what needs the spec (pydantic, ~0.3 s): the instances boot meanwhile.
        from shipyard.control.metrics import LogScraper
        from shipyard.control.spot import SpotSimulator
        from shipyard.control.watchers import start_watchers

        record = self.store.get_job(self.name)
        self.first_started_at = record.training_start_time or self.started_at
        if record.training_start_time is None:
            self.store.update_job(self.name, training_start_time=self.started_at)
        self._pool_started()
        self.spot = SpotSimulator(self.spec)
        if self.spec.max_cost is not None:
            from shipyard.control.billing import prices, rate

            self.cost_rate = rate(self.spec, prices())
        self.watchers = start_watchers(self.spec, self.job_dir, self.store)
        self.last_watch = 0.0
        self.scrapers = [
            LogScraper(i.host, Path(i.plan.config.log_path), self.spec.all_metric_definitions,
                       self.log_offsets.get(i.host, 0))
            for i in self.instances
        ]
        self._attempt_started()

    def step(self) -> State:
        """One transition from the current state; returns the new one."""
        handler = {
            State.QUEUED: self._step_queued, State.RUNNING: self._step_running,
            State.INTERRUPTED: self._step_interrupted, State.RESTARTING: self._step_restarting,
            State.UPLOADING: self._step_ending, State.FAILING: self._step_ending, State.STOPPING: self._step_ending,
        }[self.state]
        following = handler()
        if following not in TRANSITIONS[self.state]:
            raise RuntimeError(f"the controller cannot go from {self.state.name} to {following.name}")
        self.state = following
        return following

    def _start_instances(self, plan: dict, keep: tuple = (), master_port: int | None = None) -> None:
        """Start the plan's instances; `keep` are running instances that stay (they rejoin at
        `master_port`, or where the backend chooses it)."""
        from shipyard.backends import get_backend

        backend = self.backend or get_backend(plan["backend"], job_dir=self.job_dir)
        self.started_by = backend   # it uploads their artifacts
        plans = [backend.plan_type.from_dict(item) for item in plan["instances"]]
        self.started_at = time.time()
        self.attempt_clock = time.monotonic()  # max_run counts from when the instances have somewhere to run
        kept = {i.host: i for i in keep}
        start = backend.start
        if self.claimed and self.attempt == 1:
            def start(plan):
                return backend.attach(plan, self.pool, self.adopted.get(plan.host))
        self.instances = [kept.get(p.host) or start(p) for p in plans]
        if keep:
            backend.rejoin(list(keep), master_port)
        self.kept = tuple(keep)
        self.download_reported = False
        self.exit_codes: dict[str, int] = {}
        self.exit_order: list[str] = []
        self.phases: dict[str, str] = {}
        self.waiting: str | None = None

    def _open_store(self) -> None:
        if self.store is None:
            from shipyard.store import Store

            self.store = Store(self.home)

    @functools.cached_property
    def pools(self):
        """store/pools.py, for a job with keep_alive_period_in_seconds."""
        from shipyard.store.pools import PoolStore

        self._open_store()
        return PoolStore(self.store)

    @functools.cached_property
    def spec(self):
        return self.store.get_job(self.name).spec

    def _stale(self, plan: dict) -> bool:
        """The plan written at submit stands unless the job waited (a port chosen then may be taken now)
        or the queue handed it other GPUs than the plan's (another job holds those)."""
        if self.queued_since is not None:
            return True
        return self.machine is not None and self.machine.gpus != tuple(
            gpu for item in plan["instances"] for gpu in item["config"]["gpu_ids"])

    def _take_over(self) -> dict:
        """Continue a job whose controller died: its instances died with it, so the next attempt starts
        fresh instances that restore the checkpoints; time already run still counts against max_run."""
        from shipyard.runtime.tail import end_of_last_line

        attempts = self.store.attempts(self.name)
        self.attempt = len(attempts) + 1
        if self.spec.keep_alive_period_in_seconds:
            from shipyard.control.pools import abandon

            abandon(self.store, self.name, "the controller of its job died")
        self.run_seconds = sum(a["end_time"] - a["start_time"] for a in attempts if a["end_time"])
        # Taken before the new instances start: the lines before were scraped by the dead controller (all
        # but what was printed in its last poll interval), the lines after are this attempt's.
        self.log_offsets = {h: end_of_last_line(self.store.log_path(self.name, h)) for h in self.spec.hosts}
        return self._plan_attempt()[0]

    def _attempt_started(self) -> None:
        from shipyard.runtime.events import EventReader

        self.attempt = self.store.start_attempt(self.name, self.started_at)
        self.store.add_event(self.name, "info", f"attempt {self.attempt}: started {len(self.instances)} instance(s): "
                             + ", ".join(f"{i.host} ({i.location})" for i in self.instances))
        problem = self.instances[0].plan.sandbox_problem
        if problem and self.attempt == 1:
            self.store.add_event(self.name, "warning", f"instances run without a sandbox: {problem}; "
                                 "SM_* paths point at each instance's directory, not /opt/ml")
        # An instance kept from the last attempt goes on reading its events where it left off.
        self.readers = {i.host: self.readers[i.host] if i in self.kept
                        else EventReader(Path(i.plan.config.events_path)) for i in self.instances}
        self.last_hang_check = 0.0
        self.interrupt_at = self.spot.interruption_after(self.attempt)

    # -- QUEUED: wait until the instances fit ----------------------------------------------------
    def _step_queued(self) -> State:
        """Ask the capacity queue (store/queue.py) once; start the instances when it admits the job."""
        from shipyard.backends.resources import detect, side_by_side
        from shipyard.store.queue import CapacityQueue, Wait

        self._open_store()
        if reason := self.store.stop_requested(self.name):
            self.store.transition(self.name, "Stopping", "Stopping", reason)
            self._finish("Stopped", "Stopped", message=reason)
            return State.STOPPED
        if self.adopted:   # started at submit: nothing to wait for
            self.start()
            return State.RUNNING
        if self.queue is None:
            self.queue, self.detected = CapacityQueue(self.store), detect()
        if self._claim_pool():
            try:
                self.start()
            except OSError as exc:   # a warm process died after the claim: the job starts otherwise
                self._drop_pool(f"warm instance unreachable when job {self.name} claimed it: {exc}")
                self.store.add_event(self.name, "warning", f"warm pool unreachable ({exc}); starting cold")
                return State.QUEUED
            self.queue.leave(self.name)
            return State.RUNNING
        decision = self.queue.admit(self.name, side_by_side(self.detected), self.detected.gpus)
        if isinstance(decision, Wait):
            self.queued_since = self.queued_since or time.monotonic()
            if decision.message != self.queue_message:
                self.queue_message = decision.message
                self.store.transition(self.name, "InProgress", "Starting", decision.message)
            self._reconcile_dead(decision.blockers)
            return State.QUEUED
        if decision is not None:  # None: not queued (a backend that queues by itself)
            self.machine = dataclasses.replace(self.detected, gpus=decision.gpus)
        if self.queued_since is not None:
            waited = time.monotonic() - self.queued_since
            self.store.transition(self.name, "InProgress", "Starting",
                                  f"Waited {waited:.1f} s for capacity; starting the instances")
        self.start()
        return State.RUNNING

    # -- warm pools (store/pools.py, backends/pool.py) ------------------------------------------------
    def _claim_pool(self) -> bool:
        """A job with keep_alive takes a matching Available pool if there is one (its instances are
        attached, so no capacity is needed beyond the pool's)."""
        from shipyard.control.pools import claim

        pool = claim(self.store, self.store.spec_fields(self.name))   # stored fields: no pydantic yet
        if pool is None:
            return False
        self.pool, self.claimed = pool.name, True
        return True

    def adopt(self, pool: str, connections: dict[str, int]) -> None:
        """The submitting client sent the job to the pool's warm processes: start with their connections."""
        self.pool, self.claimed, self.adopted = pool, True, connections

    def _pool_started(self) -> None:
        """This job's instances boot warm: they are a new pool, named after the job, kept by this controller."""
        if self.claimed or not self.spec.keep_alive_period_in_seconds or self.attempt > 1:
            return
        if not any(getattr(i.plan, "warm", None) for i in self.instances):
            self.store.add_event(self.name, "warning", "no warm pool: warm instances need the sandbox "
                                 f"({self.instances[0].plan.sandbox_problem or 'backend ' + self.spec.backend})")
            return
        import psutil

        from shipyard.backends.pool import PRELOAD

        spec = self.spec
        self.pool = self.name
        me = psutil.Process()
        self.pools.create(self.name, instance_type=spec.instance_type, instance_count=spec.instance_count,
                          backend=spec.backend, keep_alive=spec.keep_alive_period_in_seconds,
                          keeper=(me.pid, me.create_time()), members={},
                          preload=PRELOAD.get(spec.framework or "", ()))

    def _leave_pool(self) -> None:
        """Before the final status: keep the pool (Available for keep_alive) or end it, as SageMaker does
        (control/pools.py `keeps_pool`)."""
        if self.pool is None:
            return
        from shipyard.control.pools import keeps_pool

        reason = self.ending.reason if isinstance(self.ending, Fail) else None
        up = all(i.started for i in self.instances)
        affordable = self._affordable_keep_alive()
        if up and keeps_pool(self.state.name, reason) and affordable >= 1:
            for instance in self.instances:
                instance.detach()
            if not self.claimed:
                self.pools.set_members(self.pool, {i.host: i.member() for i in self.instances})
            pool = self.pools.keep(self.name)
            kept = self.spec.keep_alive_period_in_seconds
            if affordable < kept:
                self.pools.update_keep_alive(self.name, affordable)
                self.store.add_event(self.name, "info", f"warm pool {pool.name} kept for {affordable} s, not "
                                     f"{kept}: what max_cost ${self.spec.max_cost:,.2f} leaves pays for no more")
            else:
                self.store.add_event(self.name, "info", f"warm pool {pool.name} kept for {kept} s")
            return
        if up and affordable < 1:
            reason = reason or f"max_cost ${self.spec.max_cost:,.2f} leaves nothing to pay for its retention"
        reason = (reason or self.state.name) if up else "its instances were not up yet"
        self._drop_pool(f"not kept after job {self.name}: {reason.splitlines()[0]}")

    def _affordable_keep_alive(self) -> int:
        """The pool's retention is billed to the job: with max_cost, only as long as the budget left after
        the job's running cost pays for."""
        if self.spec.max_cost is None:
            return self.spec.keep_alive_period_in_seconds
        from shipyard.control.billing import keep_alive_within, prices

        return int(min(keep_alive_within(self.spec, self.cost_rate * self.run_seconds, prices()),
                       self.spec.keep_alive_period_in_seconds))

    def _drop_pool(self, reason: str) -> None:
        """End the pool; instances this controller started stop now (the next attempt starts cold)."""
        if self.pool is None:
            return
        self.pools.terminate(self.pool, reason)
        if not self.claimed:
            for instance in self.instances:
                instance.release()
        self.pool, self.claimed = None, False

    def keep_pool(self) -> None:
        """After the job: the keeper of the pool it started stays, as its instances' parent, until the
        pool ends (control/pools.py)."""
        if self.pool is None or self.claimed:
            return
        from shipyard.control.pools import keep

        keep(self.store, self.pool, self.instances)

    def _reconcile_dead(self, blockers: tuple) -> None:
        """A job ahead whose controller died would hold its capacity or its place forever: whoever waits
        behind it reconciles it (control/reconcile.py: a new controller continues it, or it ends)."""
        if time.monotonic() - self.last_liveness < LIVENESS_SECONDS:
            return
        from shipyard.control.reconcile import controller_alive, reconcile

        self.last_liveness = time.monotonic()
        for entry in blockers:
            if not controller_alive(entry):
                reconcile(self.store, entry.job)

    # -- RUNNING: watch the attempt, decide, act ------------------------------------------------
    def _step_running(self) -> State:
        decision = self._decide()
        if decision is None:
            return State.RUNNING
        if isinstance(decision, Complete):
            self._read_events()  # the last ones, written after the monitor's last read
            self._end_attempt("Completed", None)
            self.store.transition(self.name, "InProgress", "Uploading", "Uploading generated training model")
            return State.UPLOADING
        if isinstance(decision, Fail):
            self._shutdown(FAILURE_GRACE_SECONDS)
            self._end_attempt("Failed", decision.reason)
            self.ending = decision
            return State.FAILING
        if isinstance(decision, Stop):
            return self._stopping(decision)
        if isinstance(decision, Interrupt):
            return self._interrupted(decision.host)
        from shipyard.control.retries import record_retry

        self._shutdown(FAILURE_GRACE_SECONDS)
        self._end_attempt("Failed", decision.reason)
        self._drop_pool(f"not kept after a platform failure of job {self.name}")
        self.keep, self.restart_message = (), record_retry(self.store, self.name, decision.reason)
        return State.RESTARTING

    def _decide(self) -> Decision | None:
        """One look at the attempt, in order of precedence: a failure, completion, a stop, the rules,
        max_run and max_wait, a hang, an interruption; None while it just runs."""
        from shipyard.control import policies

        self._read_events()
        self._scrape()
        if self._waiting_for_capacity():
            self.attempt_clock = time.monotonic()
        self._poll_exits()
        if any(code != 0 for code in self.exit_codes.values()):
            return self._failure(self._first_cause())
        if len(self.exit_codes) == len(self.instances):
            return Complete()
        if reason := self.store.stop_requested(self.name):
            return Stop("Stopped", reason)
        self._follow_updates()
        if stop := self._watchers_ask_to_stop():
            return stop
        elapsed = time.monotonic() - self.attempt_clock
        running = self.run_seconds + elapsed
        timeout = (policies.timeouts(self.spec, running, time.time() - self.first_started_at)
                   or policies.budget(self.spec, self.cost_rate * running, self.cost_rate,
                                      self.spec.stop_grace_seconds + BUDGET_MARGIN_SECONDS))
        return (timeout or self._hang(elapsed)
                or policies.interruption(self.store.take_interrupt_request(self.name), self.interrupt_at, elapsed))

    def _waiting_for_capacity(self) -> str | None:
        """Instances of a backend that queues them (ray) say why they wait; shown as Pending."""
        waiting = next((i.waiting_for for i in self.instances if i.waiting_for), None)
        if waiting != self.waiting:
            self.waiting = waiting
            if waiting:
                self.store.transition(self.name, "InProgress", "Pending", waiting)
            else:
                # The attempt runs (and is billed) from when its instances had somewhere to run.
                self.started_at = time.time()
                self.store.update_attempt(self.name, self.attempt, start_time=self.started_at)
                self.store.transition(self.name, "InProgress", "Starting", "Capacity found: starting the instances")
        return waiting

    def _follow_updates(self) -> None:
        """The job's profiling was updated while it runs (control/profiling.py): the instances and the
        rule watchers follow the new spec. Passing it on is idempotent, so a version stored before this
        controller started (its instances were planned with the older spec) is passed on too."""
        if time.monotonic() - self.last_update_check < WATCH_SECONDS:
            return
        self.last_update_check = time.monotonic()
        version = self.store.spec_version(self.name)
        if version == self.spec_version:
            return
        from shipyard.control.watchers import follow_all
        from shipyard.spec.profiler import agent_settings

        self.spec_version = version
        self.__dict__.pop("spec", None)   # the cached spec: the next attempt is planned with the new one
        spec = self.spec
        settings = agent_settings(spec.profiler_config, spec.output_path, spec.job_name)
        for instance in self.instances:
            instance.control.send("profiler", settings=settings)
        follow_all(self.watchers, spec, self.job_dir, self.store)
        self.store.add_event(self.name, "info", "profiling updated: "
                             + ("off" if settings is None else f"every {settings['interval_millis']} ms"))

    def _watchers_ask_to_stop(self) -> Stop | None:
        if not self.watchers or time.monotonic() - self.last_watch < WATCH_SECONDS:
            return None
        from shipyard.control.watchers import poll_all

        self.last_watch = time.monotonic()
        request = poll_all(self.watchers, self.store, self.name)
        return Stop("Stopped", request.message) if request is not None else None

    def _hang(self, elapsed: float) -> Fail | None:
        """Heartbeats are read every couple of seconds, not every poll."""
        if not self.spec.hang_timeout_seconds or elapsed - self.last_hang_check < HANG_CHECK_SECONDS:
            return None
        from shipyard.control.policies import hang
        from shipyard.runtime.heartbeat import read_all

        self.last_hang_check = elapsed
        beats = [b for i in self.instances if i.plan.config.heartbeat_dir
                 for b in read_all(i.plan.config.heartbeat_dir)]
        return hang(beats, time.time(), self.spec.hang_timeout_seconds)

    def _poll_exits(self) -> None:
        for instance in self.instances:
            code = instance.poll()
            if code is not None and instance.host not in self.exit_codes:
                self.exit_codes[instance.host] = code
                self.exit_order.append(instance.host)

    def _first_cause(self) -> str:
        """The failed host to name: the first to fail, unless its error only says a peer went away
        (runtime/failure.py) and another fails for a reason of its own within CAUSE_WAIT_SECONDS."""
        from shipyard.control.failures import peer_lost

        deadline = time.monotonic() + CAUSE_WAIT_SECONDS
        lost_peer: dict[str, bool] = {}  # each host's failure read once
        while True:
            failed = [h for h in self.exit_order if self.exit_codes[h] != 0]
            for host in failed:
                if host not in lost_peer:
                    lost_peer[host] = peer_lost(self._instance(host), self.exit_codes[host])
            causes = [h for h in failed if not lost_peer[h]]
            if causes or time.monotonic() >= deadline or len(self.exit_codes) == len(self.instances):
                return (causes or failed)[0]
            time.sleep(POLL_SECONDS)
            self._poll_exits()

    def _failure(self, host: str) -> Fail | Retry | Interrupt:
        from shipyard.control.failures import classify
        from shipyard.control.retries import may_retry

        return classify(self._instance(host), self.exit_codes[host], self.spec.use_spot_instances,
                        may_retry(self.store, self.name, self.spec.max_retry_attempts))

    def _instance(self, host: str):
        return next(i for i in self.instances if i.host == host)

    def _read_events(self, phases: bool = True) -> None:
        for host, reader in self.readers.items():
            for event in reader.read():
                if phases or event.get("event") != "phase":
                    self._on_event(host, event)

    def _on_event(self, host: str, event: dict) -> None:
        kind = event.get("event")
        if kind == "phase":
            self.phases[host] = event["phase"]
            if event["phase"] == "Downloading" and not self.download_reported:
                self.download_reported = True
                self.store.transition(self.name, "InProgress", "Downloading", "Downloading input data")
            elif event["phase"] == "Training" and all(
                self.phases.get(i.host) == "Training" for i in self.instances
            ):
                self.store.transition(self.name, "InProgress", "Training", "Training in progress")
        elif kind == "progress":
            self.store.add_event(
                self.name, "progress",
                f"{event['what']} {event.get('channel', '')} {event['done']}/{event['total']}", host,
            )
        elif kind == "checkpoint_restored":
            self.store.update_attempt(self.name, self.attempt, restored_checkpoint=event.get("checkpoint") or "")
            self.store.add_event(self.name, "checkpoint", f"restored {event.get('files', 0)} files, "
                                 f"checkpoint {event.get('checkpoint')!r}", host)
        elif kind in ("resume_warning", "warning"):
            self.store.add_event(self.name, "warning", event["message"], host)
        elif kind == "checkpoint_flushed" and not event.get("complete"):
            self.store.add_event(self.name, "warning", "checkpoints: the final sync did not upload everything to "
                                 f"{self.spec.checkpoint_s3_uri}; see this host's log", host)
        elif kind in ("checkpoint_sync_failed", "checkpoint_sync_recovered"):
            level = "warning" if kind.endswith("failed") else "info"
            self.store.add_event(self.name, level, f"{kind.replace('_', ' ')}: {event.get('error', '')}".strip(), host)

    def _scrape(self) -> None:
        for scraper in self.scrapers:
            self.store.add_metrics(self.name, scraper.scrape())

    # -- between attempts ---------------------------------------------------------------------
    def _interrupted(self, lost: str | None) -> State:
        """Capacity went: the lost instance (or all) gets its notice; when one is lost, the others pause
        and are kept. Then INTERRUPTED until capacity returns."""
        who = lost or "all instances"
        self.store.transition(self.name, "InProgress", "Interrupted", f"Spot capacity reclaimed ({who})")
        self.keep = self._pause_survivors(lost)
        self._shutdown(self.spec.interruption_notice_seconds, [i for i in self.instances if i not in self.keep])
        self._end_attempt("Interrupted", f"spot interruption of {who}")
        self.capacity_back = time.monotonic() + self.spot.capacity_delay()
        self.restart_message = (f"Replacing {lost}; the other instances rejoin" if self.keep
                                else "Restarting after a spot interruption")
        return State.INTERRUPTED

    def _step_interrupted(self) -> State:
        from shipyard.control.policies import max_wait_spent

        if reason := self.store.stop_requested(self.name):
            return self._stopping(Stop("Stopped", reason))
        if stop := max_wait_spent(self.spec, time.time() - self.first_started_at):
            return self._stopping(stop)
        return State.RESTARTING if time.monotonic() >= self.capacity_back else State.INTERRUPTED

    def _step_restarting(self) -> State:
        if why := self.started_by.needs_new_process():
            self._continue_in_new_process(why)
        self.store.transition(self.name, "InProgress", "Starting", self.restart_message)
        self.attempt += 1
        plan, port = self._plan_attempt(self.keep)
        self._start_instances(plan, self.keep, port)
        self._attempt_started()
        return State.RUNNING

    def _continue_in_new_process(self, why: str) -> None:
        """This process becomes a new controller that takes the job over (`--continue`: the next attempt,
        from the checkpoints), keeping its pid, so the job's record still names a live controller."""
        self.store.add_event(self.name, "warning", f"{why}; a new controller process continues the job")
        print(f"controller: {why}; continuing the job in a new process", file=sys.stderr, flush=True)
        os.execv(sys.executable, [sys.executable, "-m", "shipyard.control.controller", self.name, "--continue"])

    def _pause_survivors(self, lost: str | None) -> tuple:
        """When one instance is lost, the others pause (their scripts get the notice) and keep their
        data and environment; returns them, or () when the whole job must restart."""
        survivors = tuple(i for i in self.instances if i.host != lost and i.poll() is None)
        if lost is None or len(survivors) != len(self.instances) - 1:
            return ()
        for instance in survivors:
            instance.control.send("pause")
        deadline = time.monotonic() + self.spec.interruption_notice_seconds
        paused: set[str] = set()
        while time.monotonic() < deadline and len(paused) < len(survivors):
            for instance in survivors:
                for event in self.readers[instance.host].read():
                    if event.get("event") == "paused":
                        paused.add(instance.host)
                    else:
                        self._on_event(instance.host, event)
            if any(i.poll() is not None for i in survivors):
                return ()  # a survivor ended instead of pausing: restart everything
            time.sleep(POLL_SECONDS)
        return survivors if len(paused) == len(survivors) else ()

    def _end_attempt(self, outcome: str, reason: str | None) -> None:
        self.run_seconds += time.time() - self.started_at
        self.store.update_attempt(self.name, self.attempt, end_time=time.time(), outcome=outcome, reason=reason)

    def _plan_attempt(self, keep: tuple = ()) -> tuple[dict, int]:
        """The next attempt's plan and rendezvous port: fresh instances, except those kept, which stay
        as they are (and are told the new port)."""
        from shipyard.control.planning import plan_job, write_plan

        kept = {i.host for i in keep}
        launches = [launch for launch in plan_job(self.spec, self.job_dir, self.machine, attempt=self.attempt)
                    if launch.instance.host not in kept]
        plan = write_plan(self.spec, self.job_dir, launches)
        port = launches[0].instance.config.master_port
        plan["instances"] = sorted(plan["instances"] + [i.plan.to_dict() for i in keep], key=lambda p: p["host"])
        return plan, port

    # -- endings ------------------------------------------------------------------------------
    def _stopping(self, stop: Stop) -> State:
        self.store.transition(self.name, "Stopping", "Stopping", stop.message)
        self._shutdown(self.spec.stop_grace_seconds)
        if self.store.attempts(self.name)[-1]["end_time"] is None:
            self._end_attempt("Stopped", stop.secondary)
        self.ending = stop
        return State.STOPPING

    def _step_ending(self) -> State:
        """The instances have ended: the last metrics, rules' last look, the artifacts, the final status."""
        from shipyard.control.metrics import unmatched_report
        from shipyard.control.watchers import finish_all

        self._scrape()
        before = {m["name"] for m in self.store.metrics(self.name)} if self.continuing else set()
        for problem in unmatched_report(self.spec.metric_definitions, self.scrapers, before):
            self.store.add_event(self.name, "warning", problem)
        late = finish_all(self.watchers, self.store, self.name)
        if late is not None and self.state is State.UPLOADING:
            self.store.add_event(self.name, "warning", f"{late.message}; not applied: the training had already "
                                 "ended, so the job completes")
        self._upload()
        self._leave_pool()
        if self.state is State.UPLOADING:
            self._finish("Completed", "Completed")
            return State.COMPLETED
        if self.state is State.FAILING:
            self._finish("Failed", "Failed", self.ending.reason)
            return State.FAILED
        self._finish("Stopped", self.ending.secondary, message=self.ending.message)
        return State.STOPPED

    def _finish(self, status: str, secondary: str, reason: str | None = None, message: str = "") -> None:
        """The final status; a failure's `reason` is recorded, its first line the message."""
        from shipyard.control.failures import MAX_FAILURE_REASON

        if reason:
            self.store.update_job(self.name, failure_reason=reason[:MAX_FAILURE_REASON])
        self.store.update_job(self.name, training_end_time=time.time())
        self.store.transition(self.name, status, secondary, reason.splitlines()[0] if reason else message)

    def _shutdown(self, grace: float, instances: list | None = None) -> None:
        """SIGTERM, the grace period, then SIGKILL: whatever the script saves in time is kept."""
        instances = self.instances if instances is None else instances
        running = [i for i in instances if i.poll() is None]
        for instance in running:
            instance.terminate()
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(i.poll() is None for i in running):
            time.sleep(POLL_SECONDS)
        for instance in instances:
            if instance.poll() is None:
                instance.kill()
        # What the instances said while they ended (a flush that fell short, ...); a late phase event must
        # not move the job's status back from Stopping or Interrupted.
        self._read_events(phases=False)

    def _kill_all(self) -> None:
        for instance in self.instances:
            if instance.poll() is None:
                instance.kill()

    def _upload_progress(self, name: str):
        """The artifact upload's progress as the job's events (the watch shows them as the agents'
        transfers): at the start, every PROGRESS_SECONDS, and once done."""
        from shipyard.storage.transfer import PROGRESS_SECONDS

        last = 0.0

        def report(done: int, total: int) -> None:
            nonlocal last
            if done in (0, total) or time.monotonic() - last >= PROGRESS_SECONDS:
                last = time.monotonic()
                self.store.add_event(self.name, "progress", f"upload {name} {done}/{total}")
        return report

    def _upload(self) -> None:
        from rich import filesize

        from shipyard.backends import get_backend
        from shipyard.storage import uri as uris

        output = uris.join(self.spec.output_path, self.name, "output")
        backend = self.started_by or get_backend(self.spec.backend, job_dir=self.job_dir)
        uploaded = backend.upload_artifacts(self.instances, output, self._upload_progress)
        for name, (files, size) in uploaded.items():
            self.store.add_event(self.name, "upload", f"{name}: {files} files, {filesize.decimal(size)} to "
                                 f"{uris.join(output, name)}")
        self.store.update_job(self.name, **{field: uris.join(output, name) for name, field in ARTIFACT_FIELDS.items()})


def detached(module_args: list[str], log_path: Path, home: Path, pass_fds: tuple[int, ...] = (),
             environment: dict[str, str] | None = None) -> tuple[int, float]:
    """Start `python -m MODULE ARGS...` detached (its own session, no terminal), its output appended to
    log_path; returns its pid and start time, which the caller records so a reused pid is never taken
    for it. Reaped if this client outlives it, so a finished one is never mistaken for a live zombie.
    `pass_fds`: descriptors it inherits (a warm pool's connections); `environment`: added to this one's."""
    import psutil

    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", *module_args], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            env={**os.environ, **(environment or {}), "SHIPYARD_HOME": str(home)}, start_new_session=True,
            close_fds=True, pass_fds=pass_fds,
        )
    threading.Thread(target=process.wait, daemon=True).start()
    return process.pid, psutil.Process(process.pid).create_time()


def write_controller_environment(store, name: str, environment: dict[str, str]) -> None:
    """Variables the job's controllers get besides this process's (a job submitted to a Ray cluster's home
    brings its submitter's storage credentials: control/cluster_home.py), kept for a controller that takes
    over. Only the store's owner reads them."""
    path = store.job_dir(name) / CONTROLLER_ENVIRONMENT
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        json.dump(environment, out)


def spawn(store, name: str, continuing: bool = False, handoff: tuple[str, list] | None = None) -> int:
    """Start the job's controller, record its pid, and return it. Its own output goes to the job's
    controller.log. `continuing`: take over a job whose controller died (control/reconcile.py).
    `handoff`: (pool, instances) the job was sent to at submit (control/pools.py `warm_start`); the
    controller inherits their connections, and this process lets go of its own."""
    job_dir = store.job_dir(name)
    saved = job_dir / CONTROLLER_ENVIRONMENT
    environment = json.loads(saved.read_text()) if saved.exists() else None
    job_dir.mkdir(parents=True, exist_ok=True)
    args, fds = [name, *(["--continue"] if continuing else [])], ()
    if handoff is not None:
        pool, instances = handoff
        fds = tuple(i.sock.fileno() for i in instances)
        args.append(WARM_FLAG + ",".join([pool, *(f"{i.host}={i.sock.fileno()}" for i in instances)]))
    try:
        pid, started = detached(["shipyard.control.controller", *args], job_dir / "controller.log", store.home,
                                pass_fds=fds, environment=environment)
    finally:
        for instance in handoff[1] if handoff else ():
            instance.detach()
    store.update_job(name, controller_pid=pid, controller_started=started)
    return pid


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    continuing = "--continue" in args
    warm = next((a.removeprefix(WARM_FLAG) for a in args if a.startswith(WARM_FLAG)), None)
    args = [a for a in args if a != "--continue" and not a.startswith(WARM_FLAG)]
    if len(args) != 1:
        print("usage: python -m shipyard.control.controller JOB [--continue] [--warm=POOL,HOST=FD...]",
              file=sys.stderr)
        return 2
    # The job's secret, here and never in a file: its instances inherit this process's environment.
    os.environ[SECRET_ENV] = secrets.token_urlsafe(32)
    controller = JobController(shipyard_home(), args[0], continuing)
    if warm:
        pool, *pairs = warm.split(",")
        controller.adopt(pool, {host: int(fd) for host, fd in (pair.split("=") for pair in pairs)})
    controller.run()
    controller.keep_pool()
    # What it took to run this job (large artifacts never pass through here: the figure says so).
    import resource

    print(f"controller: peak memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB",
          file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
