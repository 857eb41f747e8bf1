"""A worker instance's part in an `mpi` job, run by its agent in place of the entry point (the toolkit's
WorkerRunner, without sshd): start every `orted` the leader's mpirun asks for, inside this sandbox with
this instance's environment, so the ranks it starts are this instance's; report each one's exit; and
exit 0 once the leader says mpirun is done. The job's outcome is the leader's (a rank that fails here
fails mpirun there, which names this host).

The worker asks the leader's mailbox (mpi.mailbox) over the network: its instance may be on another
host, without the leader's files. A leader that cannot be reached fails the worker, saying so.

The request is the command line mpirun gives its remote shell. It is split as a shell would split it
(mpirun quotes its values) but run without one, so no value is ever interpreted. `--daemonize` is
dropped so that the orted stays this process's child: its output reaches this host's log and its exit
is known."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time

from shipyard.runtime.mpi.mailbox import MailboxClient, MailboxError
from shipyard.runtime.mpi.rendezvous import POLL_SECONDS

# After mpirun is done, how long an orted may take to exit on its own before it is stopped.
DRAIN_SECONDS = 10.0
_SHELL_SYNTAX = (";", "&&", "||", "|", "&", ">", "<")


def orted_argv(command: list[str]) -> list[str]:
    """The argv of the command mpirun asked its remote shell to run."""
    argv = [token for token in shlex.split(" ".join(command)) if token != "--daemonize"]
    if not argv or any(token in _SHELL_SYNTAX for token in argv):
        raise ValueError(f"not a plain command (shipyard runs mpirun's remote command without a shell): {command}")
    return argv


def say(message: str) -> None:
    print(f"shipyard mpi: {message}", flush=True)


class Worker:
    def __init__(self, rendezvous: MailboxClient, host: str) -> None:
        self.rendezvous, self.host = rendezvous, host
        self.running: dict[str, subprocess.Popen] = {}
        self.handled: set[str] = set()

    def start_requested(self) -> None:
        for request_id, command in self.rendezvous.requests(self.host).items():
            if request_id in self.handled:
                continue
            self.handled.add(request_id)
            try:
                argv = orted_argv(command)
                self.running[request_id] = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
            except (ValueError, OSError) as exc:
                say(f"cannot start {command[:1]}: {exc}")
                self.rendezvous.report_exit(self.host, request_id, 127)

    def reap(self) -> None:
        for request_id, process in list(self.running.items()):
            if self.rendezvous.cancelled(self.host, request_id) and process.poll() is None:
                process.terminate()
            code = process.poll()
            if code is not None:
                del self.running[request_id]
                # As ssh reports it: a command killed by signal N exits 128 + N.
                self.rendezvous.report_exit(self.host, request_id, 128 - code if code < 0 else code)

    def stop_all(self) -> None:
        for process in self.running.values():
            if process.poll() is None:
                process.terminate()
        for process in self.running.values():
            try:
                process.wait(timeout=DRAIN_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()

    def run(self) -> int:
        leader = os.environ.get("MASTER_ADDR", "the leader")
        say(f"{self.host} waiting for mpirun on {leader}")
        while (code := self.rendezvous.finished()) is None:
            self.start_requested()
            self.reap()
            time.sleep(POLL_SECONDS)
        deadline = time.monotonic() + DRAIN_SECONDS
        while self.running and time.monotonic() < deadline:
            self.reap()
            time.sleep(POLL_SECONDS)
        self.stop_all()
        say(f"mpirun on {leader} finished with exit code {code}; its exit code is the job's")
        return 0


def main() -> int:
    mailbox = MailboxClient.from_environment()
    worker = Worker(mailbox, mailbox.host)

    def stop(signum, frame) -> None:
        worker.stop_all()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        return worker.run()
    except MailboxError as exc:
        say(str(exc))
        worker.stop_all()
        return 1


if __name__ == "__main__":
    sys.exit(main())
