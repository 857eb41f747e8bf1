"""Instance sandboxes with bubblewrap: on this machine, what a SageMaker container gives a training job.

bwrap applies its mounts in order, each over the ones before, so a later bind can show again a part of
what an earlier tmpfs hid. `wrap()` plans, in this order:

1. the whole file system read-only (`--ro-bind / /`), this machine's devices (GPUs) and a /proc of the
   sandbox's own PID namespace;
2. /opt: a tmpfs, so that /opt/ml has a place without touching this machine's /opt, every other entry of
   /opt bound back read-only, /opt/ml the instance's own ml directory, and in it each file system
   channel's directory, read-only (FileSystemInput);
3. an empty, writable /tmp, /var/tmp and /dev/shm of the instance's own (scripts that all write /tmp/x,
   on every instance, no longer meet), and no inherited TMPDIR pointing elsewhere;
4. hidden, each under an empty tmpfs (writable, so caches written to ~ land there and go away): the home
   directories (/root, /home, $HOME), SHIPYARD_HOME (the store and every job's files), the directory the
   job directories are in (on Ray nodes it is not under SHIPYARD_HOME), and the directory the job was
   planned from: the user's project, which a SageMaker container never sees either (the code reaches the
   instance as sourcedir.tar.gz, data as channels). $HOME and that directory stay visible when they are
   / or lie in the system's own directories (/usr, /opt, /var, ...), which must stay whole;
5. read-only, where those hid them: the Python environment that runs the agent (its prefixes, every
   sys.path entry its interpreter starts with, from PYTHONPATH and .pth files, and the source trees of its
   editable installs, this package's included: in a home directory, in the project's .venv) and the
   job's local inputs (file:// or plain-path channels, the code archive);
6. read-write, each at its own path: the job's local outputs (checkpoint URI, debugger and profiler
   output; checkpoint and tensor directories outside /opt/ml, which are this machine's paths as they are
   without a sandbox) and the job's own directory: the agent's log, events, heartbeats, the instance
   directories (agent.json, control file, site-packages) and the mpi rendezvous
   (runtime/mpi/rendezvous.py), which the instances of one job share;
7. an /etc/hosts that resolves every algo-*.

Directories are hidden where they really are (a tmpfs over a symlink would hide nothing), and what an
instance needs is bound where it really is and, when hidden, also at the path the agent names it by
(`_mount_points`).

Networking is shared with this machine: each instance gets its own loopback address (127.0.1.N), and
ports a job needs are allocated per job, because a private network namespace would also cut the
instance off from loopback services it needs (object storage, package indexes)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard.contract.hyperparameters import decode
from shipyard.settings import shipyard_home
from shipyard.storage import uri as uris

if TYPE_CHECKING:
    from shipyard.runtime.config import AgentConfig

SANDBOX_OPT = Path("/opt")
SANDBOX_ML = SANDBOX_OPT / "ml"
HOME_DIRS = (Path("/root"), Path("/home"))
# Temporary directories every instance gets an empty one of its own.
PRIVATE_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))
# Top-level directories of the system itself: a $HOME or working directory in one of them is not hidden,
# since that would take the system's own files away (/usr/local/bin, /opt/conda, /var/lib/...).
SYSTEM_DIRS = frozenset({"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "nix", "opt", "proc",
                         "run", "sbin", "snap", "sys", "usr", "var"})
# Run by the agent's own interpreter, so the paths are those the agent starts with (not the planning
# process's, which pytest or a notebook may have added to). setuptools' editable installs map packages to
# source trees that are on no sys.path entry.
_PYTHON_PATHS = """
import json, sys
paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path]
for name, module in list(sys.modules.items()):
    if name.startswith("__editable__") and isinstance(getattr(module, "MAPPING", None), dict):
        paths += module.MAPPING.values()
print(json.dumps(paths))
"""


def host_address(index: int) -> str:
    """The loopback address of the index-th (1-based) instance: 127.0.1.1, 127.0.1.2, ..."""
    return f"127.0.{1 + (index - 1) // 254}.{(index - 1) % 254 + 1}"


def hosts_file(addresses: dict[str, str]) -> str:
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{address}\t{host}" for host, address in addresses.items()]
    return "\n".join(lines) + "\n"


def bwrap_problem() -> str | None:
    """None when bubblewrap can make our sandboxes here, else why not (shown to the user).
    SHIPYARD_SANDBOX=off runs instances as plain processes on purpose."""
    return _bwrap_problem(os.environ.get("SHIPYARD_SANDBOX", ""))


@functools.cache
def _bwrap_problem(setting: str) -> str | None:
    if setting.lower() in ("0", "off", "none", "false"):
        return "disabled by SHIPYARD_SANDBOX"
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return "bubblewrap (bwrap) is not installed; run `make setup` or `apt-get install bubblewrap`"
    # Every kind of option wrap() uses: a bwrap too old for one, or a machine that refuses a read-only
    # root or a tmpfs, is told here rather than failing every job.
    probe = [bwrap, "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc",
             "--tmpfs", "/tmp", "--ro-bind-try", "/nonexistent", "/nonexistent", "--bind", "/tmp", "/tmp/bound",
             "--symlink", "/tmp", "/tmp/link", "--unsetenv", "TMPDIR",
             "--unshare-uts", "--hostname", "algo-probe", "--unshare-pid", "--die-with-parent", "--", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap cannot run here: {exc}"
    if done.returncode != 0:
        return f"bubblewrap cannot make the instance sandbox here: {done.stderr.strip() or done.returncode}"
    return None


@dataclass(frozen=True)
class Machine:
    """What sandboxes are planned from: this machine and the environment planning them (`machine()`)."""

    bwrap: str
    opt: tuple[tuple[str, str | None], ...]  # /opt's entries but ml: (name, symlink target or None)
    private: tuple[Path, ...]                # PRIVATE_DIRS this machine has
    hidden: tuple[Path, ...]                 # its directories no instance sees
    python: tuple[Path, ...]                 # the Python environment, shown read-only
    # Compiled torch extensions (DeepSpeed's ops), kept across jobs: each instance's home is empty, and
    # building them again costs every DeepSpeed job about 100 s. Read-write, shared by the user's jobs.
    extensions: Path | None = None


def machine() -> Machine:
    """This machine's facts, and the planning environment's, that wrap() plans from."""
    opt = ()
    if SANDBOX_OPT.is_dir():
        opt = tuple((entry.name, os.readlink(entry) if entry.is_symlink() else None)
                    for entry in sorted(SANDBOX_OPT.iterdir()) if entry.name != SANDBOX_ML.name)
    users = [Path.home()]
    try:
        users.append(Path.cwd())
    except FileNotFoundError:  # deleted since: nothing of it left to hide
        pass
    hidden = [*HOME_DIRS, shipyard_home(), *(p for p in map(_real, users) if _user_dir(p))]
    python = (*_python_paths(sys.executable, os.environ.get("PYTHONPATH", "")), Path(__file__).resolve().parents[1])  # shipyard itself
    return Machine(
        bwrap=shutil.which("bwrap") or "bwrap",
        opt=opt,
        # Mounted where they really are (a tmpfs over a symlink would hide nothing); a tmpfs needs its
        # directory to exist, the root being read-only by then.
        private=tuple(dict.fromkeys(_real(p) for p in PRIVATE_DIRS if p.is_dir())),
        hidden=tuple(dict.fromkeys(p for p in map(_real, hidden) if p.is_dir())),
        python=tuple(dict.fromkeys(python)),
        extensions=extension_cache(),
    )


def extension_cache() -> Path:
    """TORCH_EXTENSIONS_DIR when the user set it, else ~/.cache/shipyard/torch_extensions."""
    given = os.environ.get("TORCH_EXTENSIONS_DIR")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return _real(given) if given else _real(cache / "shipyard" / "torch_extensions")


@functools.cache
def _python_paths(executable: str, pythonpath: str) -> tuple[Path, ...]:
    """pythonpath: only a key, the interpreter reads it from the environment it inherits."""
    done = subprocess.run([executable, "-c", _PYTHON_PATHS], capture_output=True, text=True, check=True,
                          cwd="/", timeout=60)
    return tuple(Path(os.path.abspath(p)) for p in json.loads(done.stdout) if os.path.isabs(p))


def _user_dir(path: Path) -> bool:
    return len(path.parts) > 1 and path.parts[1] not in SYSTEM_DIRS


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(path))


def _under(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """Each path once, and none under another one (its mount would already show it)."""
    kept: list[Path] = []
    for path in sorted(set(paths)):
        if not _under(path, kept):
            kept.append(path)
    return kept


def _local_path(uri: str | None) -> Path | None:
    """The path a local URI (file://, local:// or a plain path) names, as the agent reads it."""
    if not uri or not uris.is_local(uri):
        return None
    return Path(uris.filesystem(uri)[1])


def _host_path(container_path: str | None) -> Path | None:
    """A container path the agent writes: under /opt/ml it is the instance's own; elsewhere it is this
    machine's path, as it is without a sandbox (runtime/config.py AgentConfig.checkpoint_dir)."""
    if not container_path or Path(container_path).is_relative_to(SANDBOX_ML):
        return None
    return Path(container_path)


def job_paths(config: AgentConfig, job_dir: Path) -> tuple[list[Path], list[Path]]:
    """(read-only, read-write): the paths outside /opt/ml the agent needs, as it names them. The read-write
    ones must exist when the sandbox starts (`make_writable`)."""
    code = decode(config.hyperparameters).get("sagemaker_submit_directory")
    reads = [_local_path(c.uri) for c in config.channels] + [_local_path(code)]
    debugger, profiler, tensorboard = config.debugger or {}, config.profiler or {}, config.tensorboard or {}
    writes = [Path(job_dir), _local_path(config.checkpoint_uri), _local_path(debugger.get("S3OutputPath")),
              _local_path(profiler.get("uri")), _host_path(config.checkpoint_local_path),
              _host_path(debugger.get("LocalPath")), _host_path(config.model_dir),
              _local_path(tensorboard.get("S3OutputPath")), _host_path(tensorboard.get("LocalPath")),
              _local_path(config.output_prefix)]
    return [p for p in reads if p is not None], [p for p in writes if p is not None]


def make_writable(config: AgentConfig, job_dir: Path) -> None:
    """Create the directories the sandbox binds read-write (a bind needs its source)."""
    for path in (*job_paths(config, job_dir)[1], extension_cache()):
        _real(path).mkdir(parents=True, exist_ok=True)  # not through a symlink to a directory not made yet


def _mount_points(paths: Iterable[Path], covered: list[Path], writable: bool) -> list[Path]:
    """Where to bind paths so that each is there both as the agent names it and where it really is: at its
    real path when that is hidden (always, to be writable over the read-only root), and at its own path
    too when that is hidden (a symlink on the way is gone with it). A path through a visible symlink is
    bound at its real path only: a bind cannot follow a symlink into a hidden directory."""
    points = []
    for path in paths:
        real = _real(path)
        if writable or _under(real, covered):
            points.append(real)
        if path != real and _under(path, covered):
            points.append(path)
    return _outermost(points)


def instance_mounts(config: AgentConfig, *, job_dir: Path, hosts: Path, machine: Machine) -> list[tuple[str, str, str]]:
    """The instance's own mounts, in order, as (kind, source, target): its /opt/ml, private and hidden
    directories, what is shown again (steps 2-7 above, less /opt itself). bubblewrap applies them to a
    cold instance (`wrap`); a warm one applies them in each job's namespace (runtime/namespace.py)."""
    mounts = [("bind", str(Path(config.instance_dir) / "ml"), str(SANDBOX_ML))]
    # File system channels (FileSystemInput) are their directory, read-only, at the channel's path.
    mounts += [("ro-bind", c.uri, str(SANDBOX_ML / "input" / "data" / c.name))
               for c in config.channels if c.file_system_type]
    mounts += [("tmpfs", "", str(path)) for path in machine.private]
    hidden = _outermost(p for p in (*machine.hidden, _real(job_dir).parent) if not _under(p, machine.private))
    mounts += [("tmpfs", "", str(path)) for path in hidden]
    covered = [*machine.private, *hidden]
    reads, writes = job_paths(config, job_dir)
    writable = _mount_points(writes, covered, writable=True)
    # What no hidden or private directory covers, the read-only root shows already; an input inside an
    # output comes with it. -try: missing sys.path entries are normal, a missing input is the agent's to
    # report.
    for path in _mount_points((*machine.python, *reads), covered, writable=False):
        if not _under(path, writable):
            mounts.append(("ro-bind-try", str(path), str(path)))
    mounts += [("bind", str(path), str(path)) for path in writable]
    if machine.extensions is not None:
        mounts.append(("bind-try", str(machine.extensions), str(machine.extensions)))
    mounts.append(("ro-bind", str(hosts), "/etc/hosts"))
    return mounts


def instance_environment(machine: Machine) -> dict[str, str]:
    return {"TORCH_EXTENSIONS_DIR": str(machine.extensions)} if machine.extensions is not None else {}


def _base(machine: Machine) -> list[str]:
    """The whole file system read-only, the devices, the sandbox's /proc, /opt a tmpfs with this machine's
    entries of /opt in it (step 1 and the start of step 2)."""
    command = [machine.bwrap, "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc"]
    command += ["--tmpfs", str(SANDBOX_OPT)]
    for name, target in machine.opt:
        entry = str(SANDBOX_OPT / name)
        command += ["--symlink", target, entry] if target is not None else ["--ro-bind", entry, entry]
    return command


def _isolation(host: str) -> list[str]:
    return ["--unsetenv", "TMPDIR", "--unshare-uts", "--hostname", host, "--unshare-pid", "--die-with-parent", "--"]


def wrap(argv: list[str], config: AgentConfig, *, job_dir: Path, hosts: Path, machine: Machine) -> list[str]:
    """The bwrap command line that runs argv in the instance sandbox of `config`, whose job lives in
    job_dir; hosts is its /etc/hosts. Plans only: it reads where symlinks lead, and writes nothing."""
    command = _base(machine)
    for kind, source, target in instance_mounts(config, job_dir=job_dir, hosts=hosts, machine=machine):
        command += [f"--{kind}", target] if kind == "tmpfs" else [f"--{kind}", source, target]
    for name, value in instance_environment(machine).items():
        command += ["--setenv", name, value]
    return command + _isolation(config.host) + argv


def warm_wrap(argv: list[str], host: str, *, pool_dir: Path, machine: Machine) -> list[str]:
    """The bwrap command line of a warm instance (runtime/warm.py): no job's mounts, which each job's
    namespace makes for itself from this machine's file system, shown under HOST_VIEW with the
    capability to mount it (inside the sandbox's user namespace only); its own directory read-write."""
    from shipyard.runtime.namespace import HOST_VIEW

    return [*_base(machine), "--bind", "/", str(HOST_VIEW), "--bind", str(pool_dir), str(pool_dir),
            "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP", *_isolation(host), *argv]
