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
        self.started: list[tuple] = []
        self.controls: list[tuple] = []
        self.port = 31000
        for name in ("start", "run_next", "pull", "share_artifacts", "cleanup", "terminate", "kill", "free_port",
                     "control"):
            setattr(self, name, Call(getattr(self, f"_{name}")))

    def _start(self, *args):
        self.started.append(args)
        return {"pid": 4242, "node_id": NODE}

    _run_next = _start

    def _free_port(self, span):
        return self.port

    def _control(self, action, fields):
        self.controls.append((action, fields))

    def _pull(self, *offsets):
        return {"code": self.code, "log": b"", "events": b"", "heartbeats": {}, "more": False}

    def _share_artifacts(self, uri):
        return {"shares": {}, "output_files": streams.pack_output_files(Path("/nonexistent"))}

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

    fake = types.SimpleNamespace(get=lambda ref, timeout=None: ref(), wait=lambda refs, timeout=None: (refs, []),
                                 kill=kill, exceptions=ray.exceptions, is_initialized=lambda: True)
    monkeypatch.setattr(ray_backend, "_ray", lambda: fake)
    monkeypatch.setattr(ray_backend, "_node_alive", lambda node_id: node_id == NODE)   # the node stays up
    monkeypatch.setattr(ray_backend, "cluster_lost", lambda address: None)            # and so does the head
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
    placement._started = True    # no placement thread: the tests launch it themselves (_launch)
    made = RayInstance(plan, placement)
    placement.members.append(made)
    return made


def _launch(instance: RayInstance) -> None:
    """What the placement does for a placed instance: its actor, then the start."""
    instance._make_actor(None, 0, PLACED, reuse=False)
    instance._start({"algo-1": "10.0.0.7"}, 29400, reuse=False)


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
    _launch(instance)
    stopper.join(timeout=30)
    code = _settled(instance)
    # Whatever the interleaving: the actor made was told to stop, or was killed, and the instance is over.
    assert made and (made[0].told == [stop] or made[0] in fake_ray.killed)
    assert code == {"terminate": 143, "kill": 137}[stop], _log(instance)


def test_a_stop_before_placement_makes_no_actor(fake_ray, instance, monkeypatch):
    monkeypatch.setattr(ray_backend, "_new_actor", lambda *args: pytest.fail("an actor was made"))
    instance.terminate()
    _launch(instance)
    assert instance._code == 143 and instance.actor is None and instance.placement.cancelled


def _log(instance: RayInstance) -> str:
    return Path(instance.plan.config.log_path).read_text()


def test_an_error_while_pulling_is_not_reported_as_a_start_failure(fake_ray, instance, monkeypatch):
    def broken_pull(*offsets):
        raise ray.exceptions.RayTaskError("pull", "Traceback ...", OSError("disk full"))

    actor = FakeActor()
    actor.pull = Call(broken_pull)
    monkeypatch.setattr(ray_backend, "_new_actor", lambda *args: actor)
    _launch(instance)
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
    _launch(instance)
    assert _settled(instance) == LOST_EXIT_CODE
    assert instance.lost_reason == f"its Ray actor on node {NODE} (10.0.0.7) did not answer for 0.3s"
    assert actor in fake_ray.killed and f"algo-1 lost: {instance.lost_reason}" in _log(instance)


def test_replacements_are_started_with_algo_1_s_port_and_survivors_told_where_they_are(fake_ray, home, monkeypatch):
    """A replaced algo-2 joins algo-1, a survivor on another node: the port is chosen by algo-1's actor (on
    its node), algo-2 starts knowing both addresses, and algo-1 is told the port and algo-2's new address."""
    spec = JobSpec(job_name="rayjob", instance_count=2, output_path="s3://out/jobs", backend="ray",
                   hyperparameters={"sagemaker_program": '"train.py"',
                                    "sagemaker_submit_directory": '"s3://out/jobs/rayjob/source/sourcedir.tar.gz"'})
    backend = RayBackend(home / "jobs" / "rayjob")
    plans = backend.plan(spec, backend.instance_resources(spec), 29400)
    survivor = RayInstance(plans[0], Placement("auto", plans[0].strategy, "old"))
    survivor.actor, survivor.node_address = FakeActor(), "10.0.0.7"
    survivor.actor.port = 30500
    new = FakeActor()
    monkeypatch.setattr(ray_backend, "_pool_actor", lambda name: new)   # the reused path: no placement group
    replacement = backend.start(plans[1])
    backend.rejoin([survivor], 29400)
    backend._placement.reuse({"algo-2": "10.0.0.9"})
    backend._placement._place()
    [(plan, hosts, environment, cpus_from_node, port)] = new.started
    assert hosts == {"algo-1": "10.0.0.7", "algo-2": "10.0.0.9"} and port == 30500
    assert survivor.actor.controls == [("resume", {"master_port": 30500, "host_addresses": hosts})]
    replacement._finish(0)


def test_a_survivor_s_hosts_file_is_rewritten_in_place(home):
    """The sandbox bind-mounts the file: only a write to the same inode reaches a running instance."""
    from shipyard.backends.ray.actor import InstanceActor, interface_of

    spec = JobSpec(job_name="rayjob", instance_count=2, output_path="s3://out/jobs", backend="ray",
                   hyperparameters={"sagemaker_program": '"train.py"',
                                    "sagemaker_submit_directory": '"s3://out/jobs/rayjob/source/sourcedir.tar.gz"'})
    backend = RayBackend(home / "jobs" / "rayjob")
    plan = backend.plan(spec, backend.instance_resources(spec), 29400)[0].node
    plan.hosts_path.parent.mkdir(parents=True)
    plan.hosts_path.write_text("old\n")
    inode = plan.hosts_path.stat().st_ino
    actor = InstanceActor()
    actor.plan = plan
    actor._readdress({"algo-1": "10.0.0.7", "algo-2": "10.0.0.9"})
    assert plan.hosts_path.stat().st_ino == inode
    assert plan.hosts_path.read_text().endswith("10.0.0.7\talgo-1\n10.0.0.9\talgo-2\n")
    assert actor.plan.config.host_addresses == {"algo-1": "10.0.0.7", "algo-2": "10.0.0.9"}
    assert interface_of("127.0.0.1") == "lo"



@pytest.mark.parametrize("address, failures, calls, connected", [
    ("ray://10.0.0.1:10001", 1, 2, True),     # the proxy failed to start the client's server once
    ("ray://10.0.0.1:10001", 9, 3, False),    # and every time: given up after three
    ("10.0.0.1:6379", 1, 1, False),           # not Ray Client: its errors are not retried
])
def test_a_ray_client_connection_the_head_failed_to_serve_is_made_again(monkeypatch, address, failures, calls,
                                                                       connected):
    tried = []

    def init(**kwargs):
        tried.append(kwargs["address"])
        if len(tried) <= failures:
            raise ConnectionAbortedError("Initialization failure from server: Starting Ray client server failed")

    monkeypatch.setattr(ray_backend, "_ray", lambda: types.SimpleNamespace(is_initialized=lambda: False, init=init))
    monkeypatch.setattr(ray_backend, "CLIENT_RETRY_SECONDS", 0.0)
    if connected:
        ray_backend.connect(address)
    else:
        with pytest.raises(ConnectionAbortedError):
            ray_backend.connect(address)
    assert tried == [address] * calls
