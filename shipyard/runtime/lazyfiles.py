"""FastFile on the kernel's lazy files: the channel is a directory of real files on the instance's disk, each
made at its full size with none of its bytes, behind a read-only view (the directory bound over itself)
whose accesses raise fanotify's pre-content events (FAN_PRE_ACCESS on the view's mount, Linux 6.14+: the
interface made for hierarchical storage managers). A read of a range not fetched yet waits in the kernel
until this module has fetched it (and AHEAD chunks after it), written it in through the directory beneath
the view (which raises no event) and answered; an `mmap` waits for the whole file. A file whose bytes are
all in gets an ignore mark, so from then on it is read from the disk's page cache like one of File mode's:
a second epoch reads at local speed, where a FUSE mount's page cache costs about 2x (docs/input-modes.md).

A read that still cannot be served after RETRY_SECONDS of tries (at once for an object deleted, or changed
since it was listed) fails with EIO, never with wrong bytes, and `on_error` is told the channel and the
object. Each channel has a group of its own, whose descriptor
is the agent's alone: the marks and the listener go with it, and the instance's processes with the agent.

Making a group and watching a mount take CAP_SYS_ADMIN (a root agent has it, also in bubblewrap's
sandbox), and the disk must raise pre-content events (ext4, xfs, btrfs; not tmpfs): `problem()` says why
lazy files cannot serve, and FastFile then mounts the channel with rclone instead (runtime/fastfile.py)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import struct
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from shipyard.runtime import namespace
from shipyard.storage import transfer

CHUNK = 8 * 1024 * 1024   # what one GET fetches
AHEAD = 4                 # chunks fetched after the last one a read needs
NEXT_OBJECTS = 8          # whole small objects (one chunk at most) fetched after the first read of the one before
RETRY_SECONDS = 60.0      # how long a failing range is tried again before its read gets EIO
WORKERS = 8               # GETs side by side

_FAN_CLOEXEC, _FAN_NONBLOCK, _FAN_CLASS_PRE_CONTENT = 0x1, 0x2, 0x8
_FAN_MARK_ADD, _FAN_MARK_REMOVE, _FAN_MARK_MOUNT = 0x1, 0x2, 0x10
_FAN_MARK_IGNORED_MASK, _FAN_MARK_IGNORED_SURV_MODIFY = 0x20, 0x40
_FAN_PRE_ACCESS = 0x00100000
_FAN_ALLOW, _FAN_DENY = 0x1, 0x2
_FAN_EVENT_INFO_TYPE_RANGE = 6
_METADATA = struct.Struct("IBBHQii")   # struct fanotify_event_metadata
_INFO = struct.Struct("BBH")           # struct fanotify_event_info_header
_RANGE = struct.Struct("BBHIQQ")       # struct fanotify_event_info_range
_RESPONSE = struct.Struct("iI")        # struct fanotify_response

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]


def _failed(what: str) -> OSError:
    number = ctypes.get_errno()
    return OSError(number, f"{what}: {os.strerror(number)}")


def new_group() -> int | None:
    """A fanotify group for pre-content events, or None without CAP_SYS_ADMIN."""
    fd = _libc.fanotify_init(_FAN_CLASS_PRE_CONTENT | _FAN_CLOEXEC | _FAN_NONBLOCK, os.O_RDONLY | os.O_LARGEFILE)
    return fd if fd >= 0 else None


def _mark(group: int, directory: int, name: str, flags: int) -> None:
    if _libc.fanotify_mark(group, flags, _FAN_PRE_ACCESS, directory, os.fsencode(name)) != 0:
        raise _failed(f"fanotify_mark {name}")


def watch(group: int, view: Path) -> None:
    """Ask `group` before every access through the mount at `view` (the channel's read-only view); needs
    CAP_SYS_ADMIN. Writes through the directory beneath it are not asked about: that is how the bytes get
    in. OSError where the kernel (before 6.14) or the file system (tmpfs) has no pre-content events."""
    _mark(group, -100, str(view), _FAN_MARK_ADD | _FAN_MARK_MOUNT)   # AT_FDCWD


def problem(directory: Path) -> str | None:
    """Why lazy files cannot serve a channel in `directory` here; None when they can (this process may make a
    group, and a file there takes a pre-content mark)."""
    group = new_group()
    if group is None:
        return "a fanotify group needs CAP_SYS_ADMIN"
    probe = directory / ".shipyard-lazy-probe"
    try:
        probe.touch()
        _mark(group, -100, str(probe), _FAN_MARK_ADD)
    except OSError as exc:
        return f"no pre-content events in {directory}: {exc.strerror}"
    finally:
        probe.unlink(missing_ok=True)
        os.close(group)
    return None


def make_view(directory: Path, scratch: Path) -> tuple[int, int, int]:
    """`directory` made a channel's view: bound read-only over itself and watched by a group of its own, with
    `scratch` (on the same mount, outside the view) beside it. Its descriptors: (group, the directory
    beneath the view, scratch). Needs CAP_SYS_ADMIN; OSError, with nothing left, where it cannot be made."""
    with contextlib.ExitStack() as undo:
        group = new_group()
        if group is None:
            raise OSError(errno.EPERM, "a fanotify group needs CAP_SYS_ADMIN")
        undo.callback(os.close, group)
        scratch.mkdir(parents=True, exist_ok=True)
        scratch_fd = os.open(scratch, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        undo.callback(os.close, scratch_fd)
        beneath = namespace.read_only_over(directory)
        undo.callback(unmake_view, directory, beneath)
        watch(group, directory)
        undo.pop_all()
    return group, beneath, scratch_fd


def unmake_view(directory: Path, *descriptors: int) -> None:
    """What make_view made at `directory`, gone (the marks go with the group's descriptor)."""
    namespace.unmount(directory)
    for fd in descriptors:
        os.close(fd)


def _ignore(group: int, directory: int, name: str) -> None:
    """A complete file's accesses are not asked about: an ignore mark on its inode (it goes with the inode)."""
    _mark(group, directory, name, _FAN_MARK_ADD | _FAN_MARK_IGNORED_MASK | _FAN_MARK_IGNORED_SURV_MODIFY)


class _File:
    """One object's file, and which of its chunks are in or on their way."""

    def __init__(self, key: str, size: int, identity: str, position: int) -> None:
        self.key, self.size, self.identity, self.position = key, size, identity, position
        self.chunks: dict[int, Future] = {}
        self.done = 0
        self.fd: int | None = None   # for writing, while chunks come in
        self.inode: tuple[int, int] = (0, 0)
        self.complete = size == 0

    @property
    def count(self) -> int:
        return (self.size + CHUNK - 1) // CHUNK


class LazyChannel:
    """A FastFile channel's objects as lazy files in the directory `beneath` (an O_PATH descriptor of the
    writable directory under the read-only view), fetched from `prefix` on `fs`. `scratch`: a directory on
    the same mount as `beneath`, outside the view, where an evicted file's empty successor is made."""

    def __init__(self, group: int, channel: str, beneath: int, scratch: int, fs, prefix: str,
                 pages: Iterable[dict[str, tuple[int, str]]], *, cache_bytes: int,
                 on_error: Callable[[str], None]) -> None:
        self.group, self.channel, self.beneath, self.scratch = group, channel, beneath, scratch
        self.fs, self.prefix = fs, prefix
        self.cache_bytes, self.on_error = cache_bytes, on_error
        self._lock = threading.Lock()
        self._order: list[_File] = []
        self._files: dict[tuple[int, int], _File] = {}
        self._cached: OrderedDict[int, _File] = OrderedDict()   # complete files by position, oldest first
        self._cached_bytes = 0
        self._reported: set[str] = set()
        self._make(pages)
        self._fetchers = ThreadPoolExecutor(WORKERS, thread_name_prefix=f"lazy-{channel}-get")
        self._readers = ThreadPoolExecutor(4 * WORKERS, thread_name_prefix=f"lazy-{channel}-read")
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._serve, name=f"lazy-{channel}", daemon=True)
        self._thread.start()

    def _make(self, pages: Iterable[dict[str, tuple[int, str]]]) -> None:
        """Every object's file at its full size without its bytes (an empty one with its ignore mark), a page
        of the listing at a time (the next one may be being listed meanwhile)."""
        made: set[str] = set()
        for page in pages:
            first = len(self._order)
            self._order.extend(_File(key, size, identity, first + i)
                               for i, (key, (size, identity)) in enumerate(page.items()))
            for entry in self._order[first:]:
                parent = os.path.dirname(entry.key)
                if parent and parent not in made:
                    os.makedirs(f"/proc/self/fd/{self.beneath}/{parent}", exist_ok=True)
                    made.add(parent)
                self._create(entry, entry.key, self.beneath)
                if not entry.size:
                    _ignore(self.group, self.beneath, entry.key)

    def _create(self, entry: _File, name: str, directory: int) -> None:
        """`entry`'s file at its full size without its bytes, as `name` in `directory`. Writable by its
        owner, this process, even without CAP_DAC_OVERRIDE (a warm instance's job drops it); the script
        reads it through the read-only view."""
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644, dir_fd=directory)
        try:
            os.ftruncate(fd, entry.size)
            status = os.fstat(fd)
        finally:
            os.close(fd)
        self._files.pop(entry.inode, None)
        entry.inode = (status.st_dev, status.st_ino)
        self._files[entry.inode] = entry

    def stop(self) -> None:
        os.write(self._stop_w, b"x")
        self._thread.join(timeout=10)
        self._readers.shutdown(wait=False, cancel_futures=True)
        self._fetchers.shutdown(wait=False, cancel_futures=True)
        os.close(self._stop_r)
        os.close(self._stop_w)

    # --- the kernel's questions -----------------------------------------------------------------------

    def _serve(self) -> None:
        poller = select.poll()
        poller.register(self.group, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            if self._stop_r in {fd for fd, _ in poller.poll()}:
                return
            try:
                buffer = os.read(self.group, 64 * 1024)
            except BlockingIOError:
                continue
            at = 0
            while at + _METADATA.size <= len(buffer):
                length, _, _, header, _, fd, _ = _METADATA.unpack_from(buffer, at)
                self._readers.submit(self._answer, fd, _span(buffer[at + header:at + length]))
                at += length

    def _answer(self, fd: int, span: tuple[int, int] | None) -> None:
        """Let the read of `span` in the file open as `fd` go on once its bytes are in; EIO when they cannot be."""
        response = _FAN_ALLOW
        try:
            status = os.fstat(fd)
            entry = self._files[status.st_dev, status.st_ino]   # nothing else is in the view
            if not entry.complete:
                start, count = span or (0, entry.size)
                for future in self._need(entry, start, count):
                    future.result()
        except Exception:  # the read fails rather than see bytes that are not the object's
            response = _FAN_DENY | (errno.EIO << 24)   # FAN_DENY_ERRNO(EIO)
        finally:
            try:
                os.write(self.group, _RESPONSE.pack(fd, response))
            finally:
                os.close(fd)

    def _need(self, entry: _File, start: int, count: int) -> list[Future]:
        """The chunks `count` bytes from `start` in `entry` need, on their way; once they are in, AHEAD
        after them, and after an object's first read the small objects that follow it: what a read waits
        for does not share the endpoint with what it may need next."""
        first = start // CHUNK
        last = min(entry.count - 1, max(start, start + count - 1) // CHUNK)
        with self._lock:
            fresh = not entry.chunks
            needed = [self._chunk(entry, index) for index in range(first, last + 1)]
        needed[-1].add_done_callback(lambda _: self._ahead(entry, last, fresh))
        return needed

    def _ahead(self, entry: _File, last: int, fresh: bool) -> None:
        with self._lock:
            for index in range(last + 1, min(entry.count, last + 1 + AHEAD)):
                self._chunk(entry, index)
            if fresh:
                for following in self._order[entry.position + 1:entry.position + 1 + NEXT_OBJECTS]:
                    if not following.chunks and following.count == 1:
                        self._chunk(following, 0)

    def _chunk(self, entry: _File, index: int) -> Future:
        """Chunk `index` of `entry` on its way (again, after it failed). The lock is held."""
        future = entry.chunks.get(index)
        if future is None or (future.done() and future.exception() is not None):
            future = entry.chunks[index] = self._fetchers.submit(self._fetch, entry, index)
        return future

    # --- fetching -------------------------------------------------------------------------------------

    def _fetch(self, entry: _File, index: int) -> None:
        start = index * CHUNK
        end = min(entry.size, start + CHUNK)
        path = f"{self.prefix.rstrip('/')}/{entry.key}"
        deadline, delay, tries = time.monotonic() + RETRY_SECONDS, 0.2, 0
        while True:
            tries += 1
            try:
                data = transfer.read_listed(self.fs, path, entry.size, entry.identity, start, end)
                break
            except Exception as exc:  # s3fs, botocore and aiohttp errors share no base class
                if _gone(exc) or time.monotonic() + delay > deadline:
                    self._report(path, f"{type(exc).__name__}: {exc} (at byte {start}, {tries} tries)")
                    raise
                time.sleep(delay)
                delay = min(2 * delay, 8.0)
        try:
            with self._lock:
                if entry.fd is None:
                    entry.fd = os.open(entry.key, os.O_WRONLY | os.O_CLOEXEC, dir_fd=self.beneath)
                os.pwrite(entry.fd, data, start)
                entry.done += 1
                if entry.done == entry.count:
                    self._completed(entry)
        except OSError as exc:   # the instance's disk: full, or gone
            self._report(path, f"cannot keep its bytes on the instance's disk: {exc}")
            raise

    def _report(self, path: str, what: str) -> None:
        label = self.fs.unstrip_protocol(path)
        with self._lock:
            if label in self._reported:
                return
            self._reported.add(label)
        self.on_error(f"channel {self.channel}: object {label}: {what}; reads of it fail with EIO")

    def _completed(self, entry: _File) -> None:
        """Every byte of `entry` is in: its ignore mark sends its reads straight to the page cache. Beyond the
        cache's bound the oldest complete files are replaced by empty lazy ones (the lock is held)."""
        _ignore(self.group, self.beneath, entry.key)
        os.close(entry.fd)
        entry.fd, entry.complete = None, True
        self._cached[entry.position] = entry
        self._cached_bytes += entry.size
        while self._cached_bytes > self.cache_bytes and len(self._cached) > 1:
            _, old = self._cached.popitem(last=False)
            # An empty lazy file takes its name: a reader that has it open (or mapped) keeps the whole old
            # one, whose blocks go when the last of them closes; new opens find the new one.
            self._create(old, str(old.position), self.scratch)
            os.rename(str(old.position), old.key, src_dir_fd=self.scratch, dst_dir_fd=self.beneath)
            old.complete, old.done, old.chunks = False, 0, {}
            self._cached_bytes -= old.size


def _gone(exc: Exception) -> bool:
    """The object was deleted, or changed since it was listed (its If-Match refused: s3lite's ObjectChanged,
    s3fs's FileExpired): trying again cannot help. (s3fs raises a 503 as EBUSY too: worth waiting out.)"""
    from shipyard.storage.s3lite import ObjectChanged

    s3fs = sys.modules.get("s3fs.utils")   # imported where s3fs serves the channel
    expired = (s3fs.FileExpired,) if s3fs is not None else ()
    return isinstance(exc, (FileNotFoundError, ObjectChanged, *expired))


def _span(info: bytes) -> tuple[int, int] | None:
    """(offset, count) from an event's range record; None when it has none."""
    at = 0
    while at + _INFO.size <= len(info):
        kind, _, length = _INFO.unpack_from(info, at)
        if kind == _FAN_EVENT_INFO_TYPE_RANGE:
            return _RANGE.unpack_from(info, at)[4:6]
        at += max(length, _INFO.size)
    return None
