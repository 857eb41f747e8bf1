"""A job's own mount namespace inside a warm instance's sandbox (runtime/warm.py).

A warm sandbox outlives its job, and bubblewrap's mounts are fixed when it starts, so the next job's
mounts (its /opt/ml, inputs, outputs, job directory, fresh /tmp) cannot come from bubblewrap. The warm
process keeps CAP_SYS_ADMIN inside the sandbox's user namespace and a view of this machine's file system
at HOST_VIEW; each job's first process makes a mount namespace of its own, applies the same mounts
bubblewrap would have (backends/sandbox.py `instance_mounts`, read through HOST_VIEW), drops the view and
every capability, and only then runs anything of the job's. The capabilities are the user namespace's,
never this machine's: they reach no further than the sandbox."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

# Where the warm sandbox shows this machine's root (under the sandbox's private /opt tmpfs); no job sees it.
HOST_VIEW = Path("/opt/.shipyard-host")

_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 24, 38
_LAST_CAP = 63
_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int) -> None:
    _check(_libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(), flags, None),
           f"mount {source} on {target}")


def _mount_point(target: Path, like: Path) -> None:
    """A bind needs its target to exist and be of its source's kind (bubblewrap makes them too)."""
    if target.exists() or target.is_symlink():
        return
    if like.is_dir():
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()


def private_mounts() -> None:
    """A mount namespace of this process's own: what it mounts leaks nowhere (to the warm sandbox, to this
    machine) and goes with the last process in it. Only while the process has one thread."""
    _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)


def enter(mounts: list[list[str]]) -> None:
    """Make this process's mount namespace the job's: `mounts` are (kind, source, target) as
    `sandbox.instance_mounts` plans them (kinds: tmpfs, bind, ro-bind, and their -try forms, which skip a
    missing source), sources being this machine's paths. Then the host view goes."""
    private_mounts()
    for kind, source, target in mounts:
        point = Path(target)
        if kind == "tmpfs":
            point.mkdir(parents=True, exist_ok=True)
            _mount("tmpfs", target, "tmpfs", _MS_NOSUID | _MS_NODEV)
            continue
        origin = HOST_VIEW / source.lstrip("/")
        if not (origin.exists() or origin.is_symlink()):
            if kind.endswith("-try"):
                continue
            raise FileNotFoundError(f"cannot bind {source}: it does not exist")
        _mount_point(point, origin)
        _mount(str(origin), target, None, _MS_BIND | _MS_REC)
        if kind.startswith("ro-"):
            _mount(None, target, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    unmount(HOST_VIEW)


def read_only_over(path: Path) -> int:
    """Bind `path` read-only over itself, in this process's mount namespace; returns an O_PATH descriptor of
    the writable directory beneath, through which this process alone can still write there."""
    beneath = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _mount(str(path), str(path), None, _MS_BIND)
    except OSError:
        os.close(beneath)
        raise
    try:
        _mount(None, str(path), None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    except OSError:
        unmount(path)
        os.close(beneath)
        raise
    return beneath


def unmount(path: Path) -> None:
    _check(_libc.umount2(str(path).encode(), _MNT_DETACH), f"umount {path}")


def drop_capabilities() -> None:
    """No capability left, none to gain back by exec (the bounding set is emptied too)."""
    for cap in range(_LAST_CAP + 1):
        _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)   # EINVAL past the kernel's last one
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
