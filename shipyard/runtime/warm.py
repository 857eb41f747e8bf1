"""A warm instance: `python -m shipyard.runtime.warm DIR [--preload MODULE]...`, the one process a warm
sandbox starts (backends/sandbox.py `warm_wrap`). It imports the job's framework once and then runs job
after job, each asked for by a job's controller over DIR/warm.sock (backends/pool.py):

    request  {"config": agent.json, "instance_dir", "log_path", "mounts": [...], "env": {...}}
                                                                      -> {"started": true}
    the job's agent ends                                              -> {"exit": code}

For each job it forks a process that makes the job's own mount namespace (runtime/namespace.py: its
/opt/ml, inputs, outputs, a fresh /tmp, /var/tmp, /dev/shm and home), drops every capability, forks the
job's zygote (runtime/zygote.py: this interpreter, framework imported, nothing of any job's) and runs the
instance agent (runtime/agent.py) as a cold instance would; the agent's Python commands are forked from
the zygote. When the job's agent has ended, or its controller's connection closed (the controller died:
what bubblewrap's --die-with-parent does for a cold instance), every process the job left is killed, so
the next job finds this process and nothing else. Nothing of a job survives it but the warm pool cache
directory (SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY), by design."""

from __future__ import annotations

import importlib
import os
import select
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

from shipyard.runtime import zygote

SOCKET_NAME = "warm.sock"
READY_FILE = "ready"   # written once the framework is imported and the socket listens


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m shipyard.runtime.warm DIR [--preload MODULE]...", file=sys.stderr)
        return 2
    directory, preload = args[0], [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--preload"]
    # The agent each job's first process runs (its imports are shipyard's own, ~0.1 s) and the
    # framework's, so neither is paid per job.
    for module in ("shipyard.runtime.agent", *preload):
        try:
            importlib.import_module(module)
        except Exception as exc:   # the job imports it itself then, and says what is wrong
            print(f"shipyard warm: {module} not preloaded: {exc}", file=sys.stderr)
    # The agent's S3 client too (~0.4 s: the first thing a Pipe or FastFile channel waits for), but for the
    # agent only: each job's zygote forgets it, its third-party packages are the job's to choose.
    for_jobs = frozenset(sys.modules)
    try:
        from shipyard.storage import uri

        uri.preload_s3()
    except Exception as exc:   # the agent imports it when it needs it
        print(f"shipyard warm: the S3 client not preloaded: {exc}", file=sys.stderr)
    server = zygote.listen(directory, SOCKET_NAME)
    with open(os.path.join(directory, READY_FILE), "w") as ready:
        ready.write(f"{zygote.threads()}\n")
    while True:
        connection = server.accept()[0]
        try:
            _serve_job(server, connection, for_jobs)
        except Exception:
            traceback.print_exc()
        finally:
            connection.close()
            _sweep()


def _serve_job(server: socket.socket, connection: socket.socket, for_jobs: frozenset[str]) -> None:
    request, _ = zygote.receive(connection)
    if request is None:
        return
    pid = os.fork()
    if pid == 0:
        server.close()
        connection.close()
        _run_job(request, for_jobs)   # never returns
    zygote.send(connection, {"started": True})
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            zygote.send(connection, {"exit": os.waitstatus_to_exitcode(status)})
            return
        if select.select([connection], [], [], 0.05)[0]:
            message, _ = zygote.receive(connection)
            if message is None:   # the job's controller is gone: so is its job
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return


def _run_job(request: dict, for_jobs: frozenset[str]) -> None:
    """In the forked child: become the job's instance agent, in the job's namespace. Its zygote keeps
    `for_jobs` and the standard library's modules."""
    from shipyard.runtime import fastfile, namespace
    from shipyard.runtime.config import AgentConfig

    code = 1
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        namespace.enter(request["mounts"])
        log = os.open(request["log_path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        config = AgentConfig.read(Path(request["config"]))
        # Lazy files' group and read-only views, and FUSE mounts, need the capability about to go; a failure
        # is the agent's to report. Lazy files start serving in the agent (threads: after the zygote forks).
        sealed = fastfile.seal(config)
        try:
            mounts = fastfile.mount_channels(config, 1, sealed, lazy=False)
        except fastfile.MountError as exc:
            mounts = exc
        namespace.drop_capabilities()
        os.environ.update(request.get("env", {}))
        os.chdir("/")
        if zygote.threads() == 1:   # forking is safe only single-threaded
            held = frozenset(name for name in sys.modules
                             if name in for_jobs or name.partition(".")[0] in sys.stdlib_module_names)
            server = zygote.listen(request["instance_dir"])
            if os.fork() == 0:   # before any of the agent's own imports
                _die_with_parent()
                zygote.keep_only(held)
                zygote.serve(server)
                os._exit(0)
            server.close()
            zygote.HELD = held
            os.environ[zygote.ENV_SOCKET] = request["instance_dir"]
        from shipyard.runtime.agent import Agent

        code = Agent(config, mounts, sealed).run()
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG


def _sweep() -> None:
    """Kill every process in the sandbox but bubblewrap's init and this one: whatever a job left."""
    mine = {1, os.getpid()}
    for _ in range(50):
        left = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in mine]
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.02)


if __name__ == "__main__":
    sys.exit(main())
