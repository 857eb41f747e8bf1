"""A shipyard home on the Ray cluster, so a job's controller can live there (`controller="cluster"`): the
user's machine may disconnect, and any machine that reaches the cluster can follow the job.

The home is one detached Ray actor per cluster (`shipyard-home` in Ray's namespace `shipyard`), pinned to
the head node, whose process keeps a store of its own under SHIPYARD_RAY_HOME on the head (default
`<SHIPYARD_RAY_NODE_DIR>/home`). A job given to it is recorded in that store and its controller started on
the head as a local controller is started, with that store: the job's record lives with its controller.
Reading it from anywhere goes through the actor: `describe` returns what describe() returns there, and
`start`/`read` run a listing, read or stop command of the `shipyard` CLI there (`logs --follow`, ...) and
pass its output back as it comes. The actor holds nothing the store does not: Ray restarts it when its
process dies, and whoever needs it makes it again when it is gone (a head restarted), over the same store.
The controllers are not its children and live on through either. Only Ray's connection is needed, no
other port: whoever can call the cluster's actors can read and stop its jobs (as they could run code there
anyway).

The class is plain Python (ray.remote wraps it where it is used, so importing this module does not import
Ray). The head needs shipyard installed in the Python its Ray workers run."""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from shipyard import settings

ACTOR_NAME, NAMESPACE = "shipyard-home", "shipyard"
# What a machine may run on the home: commands that list jobs, read one, wait for it or stop it.
COMMANDS = (("jobs", "list"), ("describe",), ("logs",), ("wait",), ("stop",))
# Of the submitting environment's forwarded variables (settings.forwarded()), those that describe the
# submitting machine: the controller on the head does not get them.
NOT_FORWARDED = frozenset({"SHIPYARD_HOME", "SHIPYARD_RAY_ADDRESS", "SHIPYARD_RAY_HOME"})
READ_POLL_SECONDS = 0.2
CONNECT_SECONDS = 5.0   # how long the cluster's address may take to accept a connection
# A command nobody has read for this long was left by a client that went away: it is ended.
ABANDONED_SECONDS = 60.0
LOST = "shipyard: the cluster's home restarted, and this command ended with it; run it again\n"


def forwarded_environment() -> dict[str, str]:
    return {k: v for k, v in settings.forwarded().items() if k not in NOT_FORWARDED}


class _Command:
    """One CLI command running on the home: its output collected by two threads until read."""

    def __init__(self, argv: list[str], home: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("SHIPYARD_RAY_ADDRESS", "RAY_ADDRESS")}
        self.process = subprocess.Popen([sys.executable, "-m", "shipyard.cli.main", *argv],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        env={**env, "SHIPYARD_HOME": str(home)})
        self.lock = threading.Lock()
        self.output = {"stdout": bytearray(), "stderr": bytearray()}
        self.read_at = time.monotonic()
        self.readers = [threading.Thread(target=self._pump, args=(name,), daemon=True) for name in self.output]
        for reader in self.readers:
            reader.start()

    def _pump(self, name: str) -> None:
        stream = getattr(self.process, name)
        while chunk := stream.read1(1 << 16):
            with self.lock:
                self.output[name] += chunk

    def read(self) -> dict:
        """What it printed since the last read, and its exit code once it has ended and all is read."""
        self.read_at = time.monotonic()
        ended = self.process.poll() is not None
        if ended:
            for reader in self.readers:
                reader.join()
        with self.lock:
            taken = {name: bytes(buffer) for name, buffer in self.output.items()}
            for buffer in self.output.values():
                buffer.clear()
        return {**taken, "exit_code": self.process.returncode if ended else None}


class ClusterHome:
    """The actor. Its calls run in threads (max_concurrency): a long read never holds up a submission."""

    def __init__(self, home: str) -> None:
        import ray

        from shipyard.store import Store

        # This cluster, for what runs here: jobs' plans and controllers.
        os.environ["SHIPYARD_RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
        self.home = Path(home)
        self.store = Store(self.home)
        self.commands: dict[int, _Command] = {}
        self.numbers = itertools.count(1)
        self.lock = threading.Lock()
        threading.Thread(target=self._end_abandoned, daemon=True).start()

    def where(self) -> dict:
        """The home's directory, and the Ray node (the head's) and process it runs in."""
        import ray

        return {"home": str(self.home), "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def submit(self, spec_json: str, environment: dict[str, str]) -> str:
        """Record the job and start its controller on the head (control/submit.py, the code already uploaded)
        in a process of its own with `environment` added, so what the submitter set (storage, the Ray
        settings its plan reads) holds for this job only, and the controller is not this actor's child (it
        outlives the actor). Returns the job's name."""
        from shipyard.errors import ShipyardError

        done = subprocess.run([sys.executable, "-m", "shipyard.control.cluster_home", "submit"], input=spec_json,
                              env={**os.environ, **environment, "SHIPYARD_HOME": str(self.home)},
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise ShipyardError(f"the cluster's home could not start the job: {done.stderr.strip()}")
        return done.stdout.strip()

    def exists(self, name: str) -> bool:
        return self.store.exists(name)

    def describe(self, name: str) -> dict:
        from shipyard.control.describe import describe

        return describe(self.store, name)

    def spec_json(self, name: str) -> str:
        return self.store.get_job(name).spec.model_dump_json()

    def start(self, argv: list[str]) -> int:
        """Run `shipyard ARGV` here (a command of COMMANDS); returns its number for read()."""
        if not any(tuple(argv[:len(command)]) == command for command in COMMANDS):
            raise ValueError(f"{argv[:2]}: only {', '.join(' '.join(c) for c in COMMANDS)} run on the cluster's "
                             "home")
        with self.lock:
            number = next(self.numbers)
            self.commands[number] = _Command(list(argv), self.home)
        return number

    def read(self, number: int) -> dict:
        with self.lock:
            command = self.commands.get(number)
        if command is None:   # started by this home's last process, which ended with it
            return {"stdout": b"", "stderr": LOST.encode(), "exit_code": 1}
        taken = command.read()
        if taken["exit_code"] is not None:
            with self.lock:
                self.commands.pop(number, None)
        return taken

    def cancel(self, number: int) -> None:
        with self.lock:
            command = self.commands.pop(number, None)
        if command is not None:
            command.process.kill()
            command.process.wait()

    def _end_abandoned(self) -> None:
        while True:
            time.sleep(ABANDONED_SECONDS / 4)
            with self.lock:
                stale = [n for n, c in self.commands.items() if time.monotonic() - c.read_at > ABANDONED_SECONDS]
            for number in stale:
                self.cancel(number)


# -- the client's side ---------------------------------------------------------------------------------


def home_actor():
    """The cluster's home (connecting this process to settings.ray_address() first), made on the head when
    there is none: it holds nothing the store on the head does not, so a new one reads the jobs of the last."""
    import ray

    from shipyard.backends.ray.backend import connect

    address = settings.ray_address()
    if not ray.is_initialized():
        _check_reachable(address)
    connect(address)
    # get_if_exists: of two processes making it at once, one makes it and both get it. max_restarts: Ray
    # starts it again when its process dies.
    return ray.remote(ClusterHome).options(
        name=ACTOR_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True, num_cpus=0,
        max_concurrency=32, max_restarts=-1, resources={"node:__internal_head__": 0.001},
    ).remote(settings.ray_cluster_home())


def _call(actor, method: str, *args):
    """ray.get of the home's `method`; the home's failure (it could not start on the head, or died during the
    call) as a ShipyardError."""
    import ray

    from shipyard.errors import ShipyardError

    try:
        return ray.get(getattr(actor, method).remote(*args))
    except ray.exceptions.RayActorError as exc:
        raise ShipyardError(f"the cluster's home (actor {ACTOR_NAME!r} on the head) failed during {method}: "
                            f"{str(exc).strip().splitlines()[-1]}; run the command again (the home restarts), and "
                            "check that shipyard is installed in the head's Python") from None


def _check_reachable(address: str) -> None:
    """Fail at once on a cluster address nothing answers at (Ray would retry for minutes)."""
    import socket

    from shipyard.errors import ShipyardError

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return   # "auto" and the like: Ray finds the cluster itself
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        raise ShipyardError(f"the Ray cluster at {address} (RAY_ADDRESS) does not answer: {exc}; start it "
                            "(`ray start --head`) or name the one that runs") from None


def submit(spec_json: str) -> str:
    """Give the job (its code already uploaded) to the cluster's home, which records it and starts its
    controller on the head."""
    return _call(home_actor(), "submit", spec_json, forwarded_environment())


def holds(store, name: str) -> bool:
    """Whether job `name` lives on the named Ray cluster's home rather than in `store`, this machine's: it
    is not here, a cluster is named (RAY_ADDRESS), and its home has it."""
    return not store.exists(name) and settings.ray_address_given() and has_job(name)


def has_job(name: str) -> bool:
    """Whether the cluster's (settings.ray_address()) home holds job `name`."""
    return _call(home_actor(), "exists", name)


def describe(name: str) -> dict:
    return _call(home_actor(), "describe", name)


def spec_json(name: str) -> str:
    return _call(home_actor(), "spec_json", name)


def run(argv: list[str], stdout=None, stderr=None) -> int:
    """Run `shipyard ARGV` on the cluster's home, its output written here as it comes; its exit code.
    Interrupted here (Ctrl-C), it is ended there."""
    actor = home_actor()
    stdout, stderr = stdout or sys.stdout.buffer, stderr or sys.stderr.buffer
    number = _call(actor, "start", list(argv))
    try:
        while True:
            taken = _call(actor, "read", number)
            for stream, name in ((stdout, "stdout"), (stderr, "stderr")):
                if taken[name]:
                    stream.write(taken[name])
                    stream.flush()
            if taken["exit_code"] is not None:
                return taken["exit_code"]
            time.sleep(READ_POLL_SECONDS)
    except BaseException:
        with contextlib.suppress(Exception):   # a home that died took the command with it
            _call(actor, "cancel", number)
        raise


def main() -> int:
    """`python -m shipyard.control.cluster_home submit`, run by the home for each job: the job's spec on stdin,
    its name on stdout once its controller is started; what went wrong on stderr."""
    from shipyard.control.controller import write_controller_environment
    from shipyard.control.submit import submit as submit_job
    from shipyard.errors import ConflictError, ShipyardError
    from shipyard.spec.job import JobSpec
    from shipyard.store import Store

    if sys.argv[1:] != ["submit"]:
        print("usage: python -m shipyard.control.cluster_home submit < SPEC.json", file=sys.stderr)
        return 2
    spec = JobSpec.model_validate_json(sys.stdin.read())
    store = Store()
    try:
        if store.exists(spec.job_name):
            raise ConflictError(f"a job named {spec.job_name!r} already exists; job names are unique")
        write_controller_environment(store, spec.job_name, forwarded_environment())
        submit_job(store, spec, hand_off=False)
    except ShipyardError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(spec.job_name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
