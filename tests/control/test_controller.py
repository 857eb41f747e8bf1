"""The job controller stepped one transition at a time against a fake backend: instances are objects
the test ends, loses or pauses; everything else is real (the store, the plans, the events files, the
artifacts). Each test checks the states the controller went through and what the store says."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import psutil
import pytest

from shipyard.backends.local import LocalBackend
from shipyard.backends import local, resources
from shipyard.backends.resources import MachineResources
from shipyard.control import planning, policies
from shipyard.control import submit as submitting
from shipyard.control.controller import TRANSITIONS, JobController, State
from shipyard.control.decisions import Fail, Interrupt, Retry, Stop
from shipyard.control.failures import classify
from shipyard.runtime import ports
from shipyard.spec.job import JobSpec
from shipyard.store import Store
from shipyard.store.queue import CapacityQueue


class FakeControl:
    """The agent's side of pause/resume: a paused agent says so in its events, as runtime/agent.py does."""

    def __init__(self, events_path: str) -> None:
        self.events_path, self.sent = events_path, []

    def send(self, action: str, **fields) -> None:
        self.sent.append((action, fields))
        if action == "pause":
            _event(self.events_path, event="paused", code=143)


class FakeInstance:
    location = "fake"

    def __init__(self, plan) -> None:
        self.plan, self.code, self.lost_reason, self.waiting_for = plan, None, None, None
        self.control = FakeControl(plan.config.events_path)
        self.terminated = False

    @property
    def host(self) -> str:
        return self.plan.host

    def poll(self) -> int | None:
        return self.code

    def terminate(self) -> None:
        self.terminated = True
        if self.code is None:
            self.code = 143

    def kill(self) -> None:
        if self.code is None:
            self.code = -9

    def fail(self, code: int, failure: str | None = None) -> None:
        """The script failed: its agent writes the toolkit's failure file, then exits."""
        if failure is not None:
            (self.plan.ml_dir / "output").mkdir(parents=True, exist_ok=True)
            (self.plan.ml_dir / "output" / "failure").write_text(failure)
        self.code = code


class FakeBackend(LocalBackend):
    """The local backend's real plans, with instances that are not processes."""

    def __init__(self, job_dir: Path) -> None:
        super().__init__(job_dir)
        self.started: list[FakeInstance] = []

    def start(self, plan) -> FakeInstance:
        Path(plan.config.log_path).touch()  # as the real start opens the host's log for the agent
        self.started.append(FakeInstance(plan))
        return self.started[-1]


SCRIPT = {"sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"file:///src/sourcedir.tar.gz"'}


def _event(path: str, **event) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(event) + "\n")


def _submit(store: Store, tmp_path: Path, name: str = "job", **fields) -> None:
    """Submit a job as fit() does (recorded, queued, laid out), without starting its controller."""
    spec = JobSpec(job_name=name, instance_count=2, output_path=f"file://{tmp_path / 'out'}",
                   stop_grace_seconds=1, hyperparameters=SCRIPT, **fields)
    with mock.patch.object(submitting, "spawn", lambda store, name, handoff=None: None):
        submitting.submit(store, spec)


@pytest.fixture
def job(home, tmp_path):
    """make(**spec fields) -> (controller, backend), the job submitted as fit() submits it and admitted
    (nothing else holds this machine)."""

    def make(**fields) -> tuple[JobController, FakeBackend]:
        store = Store(home)
        _submit(store, tmp_path, **fields)
        backend = FakeBackend(store.job_dir("job"))
        controller = JobController(home, "job", backend=backend)
        assert controller.step() is State.RUNNING
        return controller, backend

    return make


def _steps(controller: JobController, until: State, limit: int = 20) -> list[State]:
    """Step at least once, until `until`: the states gone through."""
    seen = [controller.step()]
    while seen[-1] is not until and len(seen) < limit:
        seen.append(controller.step())
    return seen


def _secondaries(store: Store) -> list[str]:
    return [t.status for t in store.get_job("job").transitions]


def test_a_job_whose_instances_succeed_uploads_then_completes(job):
    controller, backend = job()
    one, two = backend.started
    for instance in (one, two):
        _event(instance.plan.config.events_path, event="phase", phase="Training")
    assert controller.step() is State.RUNNING
    one.code = 0
    assert controller.step() is State.RUNNING  # algo-2 still runs
    two.code = 0
    assert _steps(controller, State.COMPLETED) == [State.UPLOADING, State.COMPLETED]
    store = controller.store
    record = store.get_job("job")
    assert (record.status, record.secondary_status) == ("Completed", "Completed")
    assert _secondaries(store)[-3:] == ["Training", "Uploading", "Completed"]
    assert [a["outcome"] for a in store.attempts("job")] == ["Completed"]
    assert Path(record.model_artifacts.removeprefix("file://")).is_file()


class LateRule:
    """A rule whose StopTraining fires only in its last look, after the instances ended."""

    name = "late"

    def poll(self):
        return None

    def finish(self):
        from shipyard.control.watchers import StopRequest

        return StopRequest("Stopped by rule LossNotDecreasing: the loss stalled")


def test_a_stop_training_that_fires_after_the_training_ended_is_said_not_to_apply(job):
    controller, backend = job()
    controller.watchers = [LateRule()]
    for instance in backend.started:
        instance.code = 0
    assert _steps(controller, State.COMPLETED) == [State.UPLOADING, State.COMPLETED]
    assert controller.store.get_job("job").status == "Completed"
    [warning] = [e["message"] for e in controller.store.events("job", "warning")]
    assert warning == ("Stopped by rule LossNotDecreasing: the loss stalled; not applied: the training had "
                       "already ended, so the job completes")


def test_the_failure_named_is_the_cause_not_the_peer_whose_collective_broke(job):
    controller, backend = job()
    one, two = backend.started
    one.fail(1, 'ExecuteUserScriptError:\nExitCode 1\nErrorMessage "RuntimeError: Connection closed by peer"')
    two.fail(1, 'ExecuteUserScriptError:\nExitCode 1\nErrorMessage "MemoryError: the cause"')
    assert _steps(controller, State.FAILED) == [State.FAILING, State.FAILED]
    record = controller.store.get_job("job")
    assert record.status == "Failed" and record.failure_reason.startswith("AlgorithmError: algo-2:")
    assert "the cause" in record.failure_reason
    assert [a["outcome"] for a in controller.store.attempts("job")] == ["Failed"]


@pytest.mark.parametrize("reason, message", [(None, "Stop requested"),
                                             ("Early stopping: worse than the median", None)])
def test_a_stop_request_terminates_the_instances_and_ends_stopped_saying_why(job, reason, message):
    controller, backend = job()
    controller.store.request_stop("job", reason)
    assert _steps(controller, State.STOPPED) == [State.STOPPING, State.STOPPED]
    assert all(i.terminated for i in backend.started)
    record = controller.store.get_job("job")
    assert (record.status, record.secondary_status) == ("Stopped", "Stopped")
    said = message or reason
    assert [(t.status, t.message) for t in record.transitions][-2:] == [("Stopping", said), ("Stopped", said)]


def test_max_run_counts_the_attempt_s_running_time(job):
    controller, _ = job(max_run=5)
    assert controller.step() is State.RUNNING
    controller.attempt_clock -= 6  # the attempt has run 6 s
    assert _steps(controller, State.STOPPED) == [State.STOPPING, State.STOPPED]
    assert controller.store.get_job("job").secondary_status == "MaxRuntimeExceeded"


def test_a_lost_spot_instance_is_replaced_and_the_other_rejoins(job, tmp_path):
    controller, backend = job(use_spot_instances=True, max_run=100, max_wait=100, checkpoint_s3_uri=f"file://{tmp_path / 'ck'}",
                              interruption_notice_seconds=5)
    one, two = backend.started
    two.lost_reason, two.code = "node 7 died", -9
    assert _steps(controller, State.RUNNING) == [State.INTERRUPTED, State.RESTARTING, State.RUNNING]
    assert one.control.sent[0] == ("pause", {}) and one.control.sent[1][0] == "resume"
    assert not one.terminated  # kept, with its data and environment
    replacement = backend.started[2]
    assert [i.host for i in backend.started] == ["algo-1", "algo-2", "algo-2"]
    assert controller.instances == [one, replacement]
    assert one.control.sent[1][1]["master_port"] == replacement.plan.config.master_port
    store = controller.store
    assert [(a["outcome"], a["reason"]) for a in store.attempts("job")] == [
        ("Interrupted", "spot interruption of algo-2"), (None, None)]
    assert _secondaries(store)[-2:] == ["Interrupted", "Starting"]
    one.code = replacement.code = 0
    assert _steps(controller, State.COMPLETED) == [State.UPLOADING, State.COMPLETED]


def test_a_platform_failure_is_retried_while_retries_are_left(job):
    controller, backend = job(max_retry_attempts=1)
    backend.started[0].fail(1)  # the agent died: no failure file
    assert _steps(controller, State.RUNNING) == [State.RESTARTING, State.RUNNING]
    assert controller.attempt == 2 and len(backend.started) == 4
    assert [e["message"].split(":")[0] for e in controller.store.events("job", kind="retry")] == [
        "InternalServerError"]
    backend.started[3].fail(1)  # and again: no retry left
    assert _steps(controller, State.FAILED) == [State.FAILING, State.FAILED]
    assert controller.store.get_job("job").failure_reason.startswith("InternalServerError: algo-2:")


def test_profiling_updated_while_it_runs_reaches_every_instance_and_the_rule_watcher(job):
    """enable_default_profiling() then disable_profiling() (control/profiling.py): each instance is sent
    the profiling now in force, the ProfilerReport rule is watched, then Stopped; the next attempt would
    be planned with the new spec."""
    from shipyard.control import profiling

    controller, backend = job()
    store = controller.store
    profiling.enable_default(store, "job")
    controller.last_update_check = 0.0
    assert controller.step() is State.RUNNING
    for instance in backend.started:
        [(action, fields)] = instance.control.sent
        assert action == "profiler" and fields["settings"]["interval_millis"] == 500
        assert fields["settings"]["framework"] is None and fields["settings"]["uri"].endswith("/job/profiler-output")
    assert controller.spec.profiler_config.enabled
    assert [(s["rule"], s["status"]) for s in store.rule_statuses("job", "profiler")] == [("ProfilerReport", "InProgress")]
    assert controller.step() is State.RUNNING   # nothing new: nothing sent again
    assert all(len(i.control.sent) == 1 for i in backend.started)

    profiling.disable(store, "job")
    controller.last_update_check = 0.0
    assert controller.step() is State.RUNNING
    assert all(i.control.sent[-1] == ("profiler", {"settings": None}) for i in backend.started)
    assert [(s["rule"], s["status"]) for s in store.rule_statuses("job", "profiler")] == [("ProfilerReport", "Stopped")]
    assert any(e["message"] == "profiling updated: off" for e in store.events("job", "info"))


def test_stop_while_waiting_for_capacity(job, tmp_path):
    controller, backend = job(use_spot_instances=True, max_run=100, max_wait=100, checkpoint_s3_uri=f"file://{tmp_path / 'ck'}",
                              spot_simulation={"capacity_delay_seconds": 60})
    controller.store.request_interrupt("job")
    assert controller.step() is State.INTERRUPTED
    assert controller.step() is State.INTERRUPTED  # capacity is still gone
    controller.store.request_stop("job")
    assert _steps(controller, State.STOPPED) == [State.STOPPING, State.STOPPED]
    assert [a["outcome"] for a in controller.store.attempts("job")] == ["Interrupted"]


# -- the capacity queue: waiting, then running -------------------------------------------------------
@pytest.fixture
def full(home, tmp_path, monkeypatch):
    """This machine runs 2 instances and job 'first' (2 instances; a sleeping process plays its controller)
    holds them; 'job' is submitted behind it. Yields (controller of 'job', its backend)."""
    monkeypatch.setenv("SHIPYARD_LOCAL_MAX_INSTANCES", "2")
    store = Store(home)
    _submit(store, tmp_path, name="first")
    holder = subprocess.Popen(["sleep", "600"])
    store.update_job("first", controller_pid=holder.pid, controller_started=psutil.Process(holder.pid).create_time())
    assert CapacityQueue(store).admit("first", 2, ()) is not None
    _submit(store, tmp_path)
    backend = FakeBackend(store.job_dir("job"))
    yield JobController(home, "job", backend=backend), backend
    holder.kill()
    holder.wait()


def test_a_job_waits_for_capacity_then_starts_on_a_fresh_plan(full, monkeypatch):
    controller, backend = full
    assert [controller.step(), controller.step()] == [State.QUEUED, State.QUEUED]
    store = controller.store
    record = store.get_job("job")
    assert (record.status, record.secondary_status) == ("InProgress", "Starting")
    assert [(t.status, t.message) for t in record.transitions] == [
        ("Starting", "Waiting for capacity: 1st in the queue; needs 2 instances, 2 of 2 in use")]
    assert backend.started == [] and store.attempts("job") == []
    # The port the submitting client chose may be taken by now: the attempt gets a fresh one (below the range
    # the submit drew from, so it cannot be that one again by chance).
    monkeypatch.setattr(planning, "free_port", lambda span=1: ports.JOB_PORTS_FROM - 1)
    store.transition("first", "Completed", "Completed")   # its capacity is released
    assert controller.step() is State.RUNNING
    assert {i.plan.config.master_port for i in backend.started} == {ports.JOB_PORTS_FROM - 1}
    assert len(backend.started) == 2 and len(store.attempts("job")) == 1
    waited = store.get_job("job").transitions[-1].message
    assert waited.startswith("Waited ") and waited.endswith(" s for capacity; starting the instances")


def test_a_job_stopped_while_it_waits_ends_stopped_without_an_instance_or_an_attempt(full):
    controller, backend = full
    assert controller.step() is State.QUEUED
    controller.store.request_stop("job", "Early stopping: worse than the median")
    assert controller.step() is State.STOPPED
    assert backend.started == [] and controller.store.attempts("job") == []
    record = controller.store.get_job("job")
    assert [(t.status, t.message) for t in record.transitions][-2:] == [
        ("Stopping", "Early stopping: worse than the median"), ("Stopped", "Early stopping: worse than the median")]
    assert record.training_end_time is not None
    assert CapacityQueue(controller.store).waiting() == []


def test_a_holder_whose_controller_died_is_reconciled_by_the_job_waiting_behind_it(full):
    controller, backend = full
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    Store(controller.home).update_job("first", controller_pid=dead.pid, controller_started=None)
    assert controller.step() is State.QUEUED   # it notices: 'first' (no retry left) ends Failed
    first = controller.store.get_job("first")
    assert first.status == "Failed" and "controller (pid" in first.failure_reason
    assert controller.step() is State.RUNNING and len(backend.started) == 2


def test_jobs_on_a_gpu_machine_are_planned_on_the_gpus_the_queue_handed_them(home, tmp_path, monkeypatch):
    """Both jobs are planned at submit on GPUs 0 and 1 (the machine's first); the second runs on 2 and 3."""
    gpu_box = MachineResources(vcpus=32, memory_gib=256.0, gpus=("0", "1", "2", "3"))
    monkeypatch.setattr(resources, "detect", lambda: gpu_box)
    monkeypatch.setattr(local, "detect", lambda: gpu_box)
    store = Store(home)
    gpus = {}
    for name in ("first", "second"):
        _submit(store, tmp_path, name=name, instance_type="ml.g5.xlarge")
        backend = FakeBackend(store.job_dir(name))
        assert JobController(home, name, backend=backend).step() is State.RUNNING
        gpus[name] = [i.plan.config.gpu_ids for i in backend.started]
    assert gpus == {"first": [("0",), ("1",)], "second": [("2",), ("3",)]}


def test_every_state_has_its_transitions_and_the_ends_have_none():
    assert set(TRANSITIONS) == set(State)
    assert {s for s in State if s.terminal} == {State.COMPLETED, State.FAILED, State.STOPPED}
    reachable = {JobController(Path("/nowhere"), "job").state}
    assert reachable == {State.QUEUED}
    for _ in State:
        reachable |= {t for s in reachable for t in TRANSITIONS[s]}
    assert reachable == set(State)


# -- the policies, on their own --------------------------------------------------------------------
def _spec(**fields) -> JobSpec:
    return JobSpec(job_name="job", output_path="file:///out", **fields)


def test_timeouts():
    spot = _spec(use_spot_instances=True, max_run=10, max_wait=20, spot_without_checkpoints=True)
    assert policies.timeouts(spot, run_seconds=9, since_first_start=19) is None
    assert policies.timeouts(spot, run_seconds=11, since_first_start=11) == Stop(
        "MaxRuntimeExceeded", "MaxRuntimeInSeconds 10 exceeded")
    assert policies.timeouts(spot, run_seconds=5, since_first_start=21) == Stop(
        "MaxWaitTimeExceeded", "MaxWaitTimeInSeconds 20 exceeded")
    assert policies.timeouts(_spec(max_run=10), run_seconds=5, since_first_start=10 ** 6) is None


def test_budget():
    # 0.01 USD a second; stopping takes 2 s more: stop once the cost reaches 1.00 - 0.02
    budgeted = _spec(max_cost=1.0)
    assert policies.budget(budgeted, cost=0.97, rate=0.01, stopping_seconds=2) is None
    assert policies.budget(budgeted, cost=0.98, rate=0.01, stopping_seconds=2) == Stop(
        "Stopped", "Budget reached: max_cost $1.00 (the job has cost $0.9800; stopping it takes up to 2 s more "
                   "at $36.0000 per hour)")
    assert policies.budget(_spec(), cost=10 ** 6, rate=1.0, stopping_seconds=2) is None


def test_a_job_is_stopped_before_its_cost_would_pass_max_cost(job, home):
    """The controller prices the running attempt from the catalog; 2 instances at 36 USD/h each are
    0.02 USD a second, and stopping takes the grace (1 s) and a margin (1 s) more."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "instance_types.yaml").write_text("ml.test.priced:\n  vcpus: 1\n  memory_gib: 1\n  gpus: 0\n"
                                              "  on_demand_usd_per_hour: 36\n  spot_usd_per_hour: 10.8\n")
    controller, backend = job(instance_type="ml.test.priced", max_cost=1.0)
    assert controller.cost_rate == pytest.approx(0.02)
    controller.attempt_clock -= 45   # 45 s: $0.90, and $0.04 to stop
    assert controller.step() is State.RUNNING
    controller.attempt_clock -= 3    # 48 s: $0.96 + $0.04 reaches the budget
    assert _steps(controller, State.STOPPED) == [State.STOPPING, State.STOPPED]
    assert all(i.terminated for i in backend.started)
    record = controller.store.get_job("job")
    assert (record.status, record.secondary_status) == ("Stopped", "Stopped")
    assert record.transitions[-1].message.startswith("Budget reached: max_cost $1.00 (the job has cost $0.96")
    assert controller.store.events("job", "info")[0]["message"].startswith(
        "expected cost: $72.0000 per hour (2 x ml.test.priced, on demand); at most $1,728.00 in max_run (24.0 h); "
        "max_cost $1.00 buys 50 s, then the job is stopped")


def test_interruptions():
    assert policies.interruption(None, None, 100) is None
    assert policies.interruption(None, 30.0, 29) is None
    assert policies.interruption(None, 30.0, 30) == Interrupt(None)
    assert policies.interruption("*", None, 0) == Interrupt(None)
    assert policies.interruption("algo-2", None, 0) == Interrupt("algo-2")


def test_hang_decision_names_the_rank():
    now = time.time()
    beats = [{"rank": 0, "host": "algo-1", "time": now, "progress_time": now - 400, "collective": True,
              "where": "allreduce", "steps": 4},
             {"rank": 1, "host": "algo-2", "time": now, "progress_time": now - 400, "collective": False,
              "where": "train.py:9", "steps": 4}]
    decision = policies.hang(beats, now, 300)
    assert isinstance(decision, Fail) and "rank 1 on algo-2 is not waiting for the others" in decision.reason
    assert policies.hang(beats, now, 500) is None


class _Lost:
    host, lost_reason = "algo-2", "node gone"


def test_classify_a_lost_instance():
    assert classify(_Lost(), -9, spot=True, retries_left=False) == Interrupt("algo-2")
    assert classify(_Lost(), -9, spot=False, retries_left=True) == Retry("InternalServerError: algo-2: node gone")
    assert classify(_Lost(), -9, spot=False, retries_left=False) == Fail("InternalServerError: algo-2: node gone")
