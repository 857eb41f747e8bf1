"""A fork server: a Python process with the job's framework already imported that becomes the job's
Python processes (the entry point, torchrun) by forking, instead of each paying an interpreter start and
`import torch` again (about 2 s here).

The server is forked from the warm process (runtime/warm.py) before any of the job's own code runs, so
what a forked process starts with is the framework and nothing of a job: a request names the argv, the
environment and the working directory a `python ...` command would have had, and passes its stdin,
stdout and stderr; the child rebuilds the interpreter's state from them (sys.argv, sys.path from
PYTHONPATH, fresh standard streams, default signal handlers, the sitecustomize on the new path) and runs
the script or module as `python` would. `ZygoteProcess` is the client side, shaped like `subprocess.Popen`
(pid, poll, wait, send_signal, terminate, kill, returncode) so the agent uses either.

Forking is only safe single-threaded: a server whose imports started threads refuses to serve, and the
agent falls back to executing the command."""

from __future__ import annotations

import array
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SOCKET_NAME = "zygote.sock"
ENV_SOCKET = "SHIPYARD_ZYGOTE"   # the server's directory; unset: no server, commands are executed
_SystemExit = SystemExit   # the builtin, before a job's sitecustomize records its own subclass
MAX_MESSAGE = 1 << 20   # one request (argv and environment) per packet: SOCK_SEQPACKET keeps them whole


def address(directory: str, name: str = SOCKET_NAME) -> tuple[str, int]:
    """A unix socket path must be short (108 bytes); a job directory's may not be. /proc/self/fd/N
    names the directory briefly. Returns the path and the descriptor to close once bound or connected."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{fd}/{name}", fd


def listen(directory: str, name: str = SOCKET_NAME) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    path, fd = address(directory, name)
    try:
        Path(path).unlink(missing_ok=True)
        server.bind(path)
    finally:
        os.close(fd)
    server.listen(64)
    return server


def connect(directory: str, name: str = SOCKET_NAME) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    path, fd = address(directory, name)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    finally:
        os.close(fd)
    return sock


def send(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    data = json.dumps(message).encode()
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([data], ancillary)


def receive(sock: socket.socket) -> tuple[dict | None, list[int]]:
    data, ancillary, _flags, _address = sock.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(3 * 4))
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    return (json.loads(data) if data else None), list(fds)


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def forkable(argv: list[str]) -> bool:
    """Commands a fork can become: `python [-u] script args...` and `python [-u] -m module args...`."""
    if not argv or os.path.realpath(argv[0]) != os.path.realpath(sys.executable):
        return False
    rest = argv[1:]
    while rest and rest[0] == "-u":
        rest = rest[1:]
    return bool(rest) and (not rest[0].startswith("-") or (rest[0] == "-m" and len(rest) > 1))


# In a process that forked a zygote after keep_only(): the modules the zygote holds.
HELD: frozenset[str] | None = None


def keep_only(modules: frozenset[str]) -> None:
    """Forget every module not in `modules`: a process that imports one again gets it from its own path.
    A zygote forgets what its warm process preloaded for the agent alone (its storage client)."""
    for name in [name for name in sys.modules if name not in modules]:
        del sys.modules[name]


def shadowed(directories) -> set[str]:
    """Top-level packages a zygote forked from this process holds (HELD, else this process's imports) that
    one of the directories, put first on a job's path, would provide instead."""
    loaded = {name.partition(".")[0] for name in (sys.modules if HELD is None else HELD)} - {"__main__",
                                                                                               "__mp_main__"}
    found = set()
    for directory in directories:
        try:
            entries = os.listdir(directory)
        except OSError:
            continue
        found |= {entry.removesuffix(".py") for entry in entries} & loaded
    return found


# -- the server -----------------------------------------------------------------------------------
def serve(server: socket.socket) -> None:
    """Serve fork requests on `server` (`listen()`) until the parent goes; never returns in a child
    (it becomes the requested command, whose end ends the process)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # the job's processes get their own notice
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}   # pid -> the connection that asked for it
    clients: list[socket.socket] = []
    parent = os.getppid()
    while os.getppid() == parent:
        ready, _, _ = select.select([server, wake_r, *clients], [], [], 1.0)
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(children)
        if server in ready:
            clients.append(server.accept()[0])
        for client in [c for c in clients if c in ready]:
            try:
                request, fds = receive(client)
            except OSError:
                request, fds = None, []
            if request is None:
                clients.remove(client)
                client.close()
                continue
            pid = os.fork()
            if pid == 0:
                for other in (server, *clients):
                    other.close()
                os.close(wake_r)
                os.close(wake_w)
                _become(request, fds)   # never returns
            for received in fds:
                os.close(received)
            children[pid] = client
            send(client, {"pid": pid})


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        client = children.pop(pid, None)
        if client is not None:
            try:
                send(client, {"exit": os.waitstatus_to_exitcode(status), "child": pid})
            except OSError:
                pass


# -- a forked child becomes the command -------------------------------------------------------------
def _become(request: dict, fds: list[int]) -> None:
    """Turn this fresh fork into `python ARGV...` run in `cwd` with `env`; never returns."""
    signal.set_wakeup_fd(-1)
    # As the interpreter sets them at start (SIGPIPE ignored, SIGINT raising KeyboardInterrupt).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if request.get("new_session"):
        os.setsid()
    for target, received in zip((0, 1, 2), fds, strict=False):
        os.dup2(received, target)
    os.closerange(3, _max_fd())
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv = list(request["argv"][1:])
    unbuffered = os.environ.get("PYTHONUNBUFFERED", "") != ""
    while argv and argv[0] == "-u":
        argv, unbuffered = argv[1:], True
    _fresh_streams(unbuffered)
    module = argv[1] if argv[0] == "-m" else None
    first = os.getcwd() if module else os.path.dirname(os.path.abspath(argv[0]))
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *extra, *[p for p in sys.path[1:] if p not in extra]]
    sys.argv = argv[1:] if module else argv
    sys.modules.pop("sitecustomize", None)
    import importlib
    import runpy

    try:
        try:
            importlib.import_module("sitecustomize")
        except ImportError:
            pass
        if module == "torch.distributed.run":   # its ranks are forked too
            from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler

            subprocess_handler.Popen = popen
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            _run_script(argv[0])
        code = 0
    except _SystemExit as exc:
        code = exc.code
    except BaseException as exc:   # what the interpreter does with an uncaught exception
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, exc.__traceback__
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = 1
    _exit(code)


def _run_script(path: str) -> None:
    """As `python SCRIPT` runs it: a fresh __main__ module (also what torch's __mp_main__ names, which the
    zygote's import of torch pointed at its own __main__)."""
    import builtins
    import importlib.machinery
    import types

    main = types.ModuleType("__main__")
    main.__file__, main.__builtins__, main.__spec__, main.__cached__ = path, builtins, None, None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    sys.modules["__main__"] = main
    if "__mp_main__" in sys.modules:
        sys.modules["__mp_main__"] = main
    with open(path, "rb") as source:
        code = compile(source.read(), path, "exec")
    exec(code, main.__dict__)


def _exit(code: object) -> None:
    """End as the interpreter ends a script: non-daemon threads joined, atexit handlers, streams flushed.
    Never back into the server's loop."""
    import atexit
    import threading

    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    try:
        threading._shutdown()
    except Exception:
        pass
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            status = status or 120   # as the interpreter reports a flush that failed
    os._exit(status & 0xFF)


def _max_fd() -> int:
    import resource

    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _fresh_streams(unbuffered: bool) -> None:
    """Standard streams over the new descriptors 0-2, as the interpreter makes them at start."""
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    for number, name, errors in ((1, "stdout", "strict"), (2, "stderr", "backslashreplace")):
        raw = io.FileIO(number, "w", closefd=False)
        stream = io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw), errors=errors,
                                  line_buffering=not unbuffered and raw.isatty(), write_through=unbuffered)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


# -- the client -----------------------------------------------------------------------------------
class ZygoteProcess:
    """A process forked by the job's zygote, used as a `subprocess.Popen`: `args`, `pid`, `returncode`,
    poll(), wait(timeout), send_signal(), terminate(), kill(). Its exit status comes over the socket; a
    server that went away without saying counts as the process killed."""

    def __init__(self, args: list[str], *, cwd: str, env: dict[str, str], stdin=None, stdout=None, stderr=None,
                 start_new_session: bool = False, server: str | None = None) -> None:
        self.args, self.returncode = args, None
        self._sock = connect(server or os.environ[ENV_SOCKET])
        fds = [_fd(stream, default) for stream, default in ((stdin, 0), (stdout, 1), (stderr, 2))]
        send(self._sock, {"argv": args, "cwd": cwd, "env": env, "new_session": start_new_session}, fds)
        for opened, given in zip(fds, (stdin, stdout, stderr), strict=True):
            if given == subprocess.DEVNULL:
                os.close(opened)
        reply, _ = receive(self._sock)
        if reply is None:
            raise OSError("the zygote went away before forking")
        self.pid = reply["pid"]

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._sock], [], [], 0)[0]:
            self._read()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            if select.select([self._sock], [], [], left)[0]:
                self._read()
        return self.returncode

    def _read(self) -> None:
        try:
            message, _ = receive(self._sock)
        except OSError:
            message = None
        self.returncode = -signal.SIGKILL if message is None else message["exit"]
        self._sock.close()

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, number)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _fd(stream, default: int) -> int:
    if stream is None:
        return default
    if stream == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_RDWR)
    return stream if isinstance(stream, int) else stream.fileno()


def popen(args, **kwargs):
    """`subprocess.Popen(args, **kwargs)`, or the same command forked from the job's zygote when there is
    one and the command is a Python one it can become (`pass_fds` then does not apply: the zygote holds no
    descriptor of the agent's)."""
    argv = [str(a) for a in args]
    if os.environ.get(ENV_SOCKET) and forkable(argv):
        return ZygoteProcess(argv, cwd=str(kwargs.get("cwd") or os.getcwd()), env=kwargs.get("env") or dict(os.environ),
                             stdin=kwargs.get("stdin"), stdout=kwargs.get("stdout"), stderr=kwargs.get("stderr"),
                             start_new_session=kwargs.get("start_new_session", False))
    return subprocess.Popen(args, **kwargs)
