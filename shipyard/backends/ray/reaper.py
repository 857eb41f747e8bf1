"""The node's watch over an unsandboxed Ray instance: `python -m shipyard.backends.ray.reaper ACTOR_PID
MARK` waits, detached, until the instance's actor process is gone, then kills every process left that
carries MARK in its environment (the agent hands its environment down to the script and all it starts).

A sandbox needs none of this (its processes die with it). Without one, an actor that dies unasked (its
controller died, and Ray takes an owner's actors with it) takes only the agent along (PR_SET_PDEATHSIG):
the script and its workers would run on, unwatched, and no one on the controller's machine can reach
them. An instance that ended normally or was stopped has nothing left to kill."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

MARK = "SHIPYARD_RAY_ACTOR_ID"
POLL_SECONDS = 1.0


def start(actor_pid: int, mark: str) -> None:
    """Returns once the reaper runs on its own (Ray kills the children of an exiting worker)."""
    subprocess.run([sys.executable, "-m", __name__, str(actor_pid), mark], check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def reap(actor_pid: int, mark: str) -> None:
    try:
        actor = psutil.Process(actor_pid)
        while actor.is_running() and actor.status() != psutil.STATUS_ZOMBIE:
            time.sleep(POLL_SECONDS)
    except psutil.NoSuchProcess:
        pass
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARK) == mark:
                proc.kill()
        except psutil.Error:
            continue


def main(argv: list[str] | None = None) -> int:
    actor_pid, mark = sys.argv[1:] if argv is None else argv
    if os.fork():   # the child runs on, no longer a child of the actor's worker
        os._exit(0)
    os.setsid()
    reap(int(actor_pid), mark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
