"""The Ray instance handle's own logic, without a cluster: a fake Ray (`get` returns what the fake
actor's calls return) and a fake actor factory. A stop that races the actor's creation must never leave
an actor running unwatched; a failing call is reported as the call it was; an actor that stops answering
is lost after CALL_TIMEOUT_SECONDS, not retried forever."""

from __future__ import annotations

import threading
import time
import types
from pathlib import Path

import pytest
import ray.exceptions

from shipyard.backends.ray import backend as ray_backend
from shipyard.backends.ray import streams
from shipyard.backends.ray.backend import LOST_EXIT_CODE, Placement, RayBackend, RayInstance
from shipyard.spec.job import JobSpec

NODE = "f" * 56
PLACED = {"algo-1": (NODE, "10.0.0.7")}


class Call:
    def __init__(self, method):
        self.method = method

    def remote(self, *args):
        """Runs the call now, as Ray would start it; the "object ref" gives its result or raises."""
        try:
            result = self.method(*args)
        except Exception as exc:
            error = exc

            def ref():
                raise error
            return ref
        return lambda: result


class FakeActor:
    """Records what it was told; its agent runs until it is terminated or killed."""

    def __init__(self) -> None:
        self.told: list[str] = []
        self.code: int | None = None
        for name in ("start", "pull", "artifacts", "cleanup", "terminate", "kill"):
            setattr(self, name, Call(getattr(self, f"_{name}")))

    def _start(self, *args):
        return {"pid": 4242}

    def _pull(self, *offsets):
        return {"code": self.code, "log": b"", "events": b"", "heartbeats": {}, "more": False}

    def _artifacts(self):
        return streams.pack_artifacts(Path("/nonexistent"))

    def _cleanup(self):
        return None

    def _terminate(self):
        self.told.append("terminate")
        self.code = 143

    def _kill(self):
        self.told.append("kill")
        self.code = 137


@pytest.fixture
def fake_ray(monkeypatch):
    killed: list[FakeActor] = []

    def kill(actor, no_restart=True):
        killed.append(actor)

    fake = types.SimpleNamespace(get=lambda ref, timeout=None: ref(), kill=kill, exceptions=ray.exceptions,
                                 nodes=lambda: [{"NodeID": NODE, "Alive": True}])
    monkeypatch.setattr(ray_backend, "_ray", lambda: fake)
    monkeypatch.setattr(ray_backend, "PULL_SECONDS", 0.01)
    fake.killed = killed
    return fake


@pytest.fixture
def instance(home):
    spec = JobSpec(job_name="rayjob", instance_count=1, output_path="s3://out/jobs", backend="ray",
                   hyperparameters={"sagemaker_program": '"train.py"',
                                    "sagemaker_submit_directory": '"s3://out/jobs/rayjob/source/sourcedir.tar.gz"'})
    backend = RayBackend(home / "jobs" / "rayjob")
    plan = backend.plan(spec, backend.instance_resources(spec), 29400)[0]
    backend.prepare(plan)
    placement = Placement("auto", plan.strategy, "test")
    placement._started = True    # no placement thread: the tests call _launch themselves
    made = RayInstance(plan, placement)
    placement.members.append(made)
    return made


def _settled(instance: RayInstance) -> int:
    deadline = time.monotonic() + 30
    while instance._code is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return instance._code


@pytest.mark.parametrize("stop", ["terminate", "kill"])
def test_a_stop_while_the_actor_is_made_stops_that_actor(fake_ray, instance, monkeypatch, stop):
    made: list[FakeActor] = []
    stopper = threading.Thread(target=getattr(instance, stop))

    def new_actor(*args):
        stopper.start()          # the controller's stop, between placement and the actor's creation
        stopper.join(timeout=0.5)
        made.append(FakeActor())
        return made[-1]

    monkeypatch.setattr(ray_backend, "_new_actor", new_actor)
    instance._launch(None, 0, PLACED)
    stopper.join(timeout=30)
    code = _settled(instance)
    # Whatever the interleaving: the actor made was told to stop, or was killed, and the instance is over.
    assert made and (made[0].told == [stop] or made[0] in fake_ray.killed)
    assert code == {"terminate": 143, "kill": 137}[stop], _log(instance)


def test_a_stop_before_placement_makes_no_actor(fake_ray, instance, monkeypatch):
    monkeypatch.setattr(ray_backend, "_new_actor", lambda *args: pytest.fail("an actor was made"))
    instance.terminate()
    instance._launch(None, 0, PLACED)
    assert instance._code == 143 and instance.actor is None and instance.placement.cancelled


def _log(instance: RayInstance) -> str:
    return Path(instance.plan.config.log_path).read_text()


def test_an_error_while_pulling_is_not_reported_as_a_start_failure(fake_ray, instance, monkeypatch):
    def broken_pull(*offsets):
        raise ray.exceptions.RayTaskError("pull", "Traceback ...", OSError("disk full"))

    actor = FakeActor()
    actor.pull = Call(broken_pull)
    monkeypatch.setattr(ray_backend, "_new_actor", lambda *args: actor)
    instance._launch(None, 0, PLACED)
    assert _settled(instance) == 1
    log = _log(instance)
    assert "could not read the logs and events of algo-1 on node" in log and "disk full" in log
    assert "could not start" not in log and actor in fake_ray.killed


def test_an_actor_that_stops_answering_is_lost_after_the_call_timeout(fake_ray, instance, monkeypatch):
    monkeypatch.setattr(ray_backend, "CALL_TIMEOUT_SECONDS", 0.3)
    actor = FakeActor()

    def unavailable(*offsets):
        raise ray.exceptions.ActorUnavailableError("connection lost", None)

    actor.pull = Call(unavailable)
    monkeypatch.setattr(ray_backend, "_new_actor", lambda *args: actor)
    instance._launch(None, 0, PLACED)
    assert _settled(instance) == LOST_EXIT_CODE
    assert instance.lost_reason == f"its Ray actor on node {NODE} (10.0.0.7) did not answer for 0.3s"
    assert actor in fake_ray.killed and f"algo-1 lost: {instance.lost_reason}" in _log(instance)
