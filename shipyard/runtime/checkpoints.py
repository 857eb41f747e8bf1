"""SageMaker's checkpoint sync: restore `checkpoint_s3_uri` into the local checkpoint directory before
the entry point runs, then mirror the local directory to the URI while the job runs.

Multi-file checkpoints: a script puts one checkpoint's files in one directory and writes the empty
file MARKER (`.complete`) there last. The sync uploads a marker only after every other file under its
directory is uploaded, and removes the remote marker before changing or deleting that directory's
files, so the remote never holds a marker without its files. With markers in use, restore skips
directories without one. See docs/checkpoints.md.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from shipyard.contract.layout import MARKER
from shipyard.errors import StorageError
from shipyard.storage import transfer
from shipyard.storage.uri import filesystem, join

WORKERS = 8
# A file seen replaced (a new inode: written elsewhere and renamed over it) this many scans in a row, by a
# script that checkpoints more often than the sync interval, is uploaded anyway from one whole version,
# so it is never starved. A file rewritten in place keeps the stability rule: it may be half written.
STARVED_SCANS = 2
# Files that changed since the last scan are held open until the next one: ext4 gives a freed inode
# number to the next new file, so a script replacing a file twice per scan shows the same number at each
# scan, as if rewritten in place, and would never be uploaded. A held inode's number cannot be reused.
HELD_FILES = 256

Stat = tuple[int, int, int]  # (size, mtime_ns, inode)


@dataclass(frozen=True)
class RestoreReport:
    files: int
    bytes: int
    checkpoint: str | None  # newest complete marked directory, or newest file when markers are unused
    skipped_incomplete: tuple[str, ...]  # remote directories left out: no marker while markers are used


def _marked_dir(rel: str) -> str | None:
    """The directory `rel` marks complete, if `rel` is a marker (a marker at the root marks nothing)."""
    head, name = posixpath.split(rel)
    return head if name == MARKER and head else None


def _under(rel: str, d: str) -> bool:
    return rel.startswith(d + "/")


def _natural(s: str) -> list:
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", s)]


def _mtime(info: dict) -> float:
    value = info.get("LastModified") or info.get("mtime") or info.get("created") or 0
    return value.timestamp() if hasattr(value, "timestamp") else float(value)


def _incomplete(rel: str, marked: set[str]) -> str | None:
    """The directory that makes `rel` part of an incomplete checkpoint, or None when it is restorable:
    inside a marked directory, at the root, or directly in a directory that holds marked ones."""
    parts = rel.split("/")[:-1]
    ancestors = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    if not marked or any(a in marked for a in ancestors):
        return None
    return next((a for a in ancestors if not any(_under(m, a) for m in marked)), None)


class CheckpointSync:
    def __init__(
        self,
        local_dir: Path,
        uri: str,
        *,
        interval: float = 1.0,
        on_event: Callable[[str, dict], None] | None = None,
        max_failures: int = 5,
        last: Callable[[str], str | None] | None = None,
    ) -> None:
        """`last(rel)`: a key for files that go up after every other file of their round, group by group
        in key order (a group's files together), and only while nothing failed before them (an index
        naming files uploaded before it); None for the others."""
        self.local_dir, self.uri = Path(local_dir), uri
        self.interval, self.on_event, self.max_failures = interval, on_event, max(1, max_failures)
        self.last = last or (lambda _rel: None)
        self._synced: dict[str, Stat] = {}  # what the remote holds from us (as of that local stat)
        self._prev: dict[str, Stat] = {}  # the previous scan, for the stability rule
        self._replaced: dict[str, int] = {}  # scans in a row that saw a file replaced
        self._held: dict[str, int] = {}  # descriptors of the files that changed at the previous scan
        self._failures = 0
        self._lock = threading.Lock()  # one round at a time (thread and flush)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def healthy(self) -> bool:
        return self._failures < self.max_failures

    # -- restore -----------------------------------------------------------------------------------

    def restore(self, progress: transfer.Progress | None = None) -> RestoreReport:
        """Copy everything under the URI into local_dir except incomplete checkpoint directories, telling
        `progress(done, total)` the bytes copied as they go."""
        fs, root = filesystem(self.uri)
        try:
            found = fs.find(root, detail=True) if fs.exists(root) else {}
        except Exception as exc:  # botocore's connection errors are not OSErrors
            raise StorageError(f"could not list checkpoints at {self.uri}: {exc}") from exc
        prefix = root.rstrip("/") + "/"
        infos = {
            name[len(prefix):]: info
            for name, info in found.items()
            if name.startswith(prefix) and info.get("type") != "directory" and not name.endswith("/")
        }
        marked = {d for d in map(_marked_dir, infos) if d}
        keys, skipped = [], set()
        for rel in sorted(infos):
            bad = _incomplete(rel, marked)
            if bad:
                skipped.add(bad)
            else:
                keys.append(rel)
        if marked:
            newest = max(marked, key=lambda d: (_mtime(infos[f"{d}/{MARKER}"]), _natural(d)))
        else:
            newest = max(keys, key=lambda k: (_mtime(infos[k]), _natural(k)), default=None)
        nbytes = transfer.download(self.uri, self.local_dir, keys, progress=progress) if keys else 0
        self.local_dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            for rel in keys:
                st = (self.local_dir / rel).stat()
                self._synced[rel] = self._prev[rel] = _stat(st)
        return RestoreReport(len(keys), nbytes, newest, tuple(sorted(skipped)))

    # -- continuous sync ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="checkpoint-sync", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        # Not behind a round still running (a flush that timed out): that round releases them itself.
        if self._lock.acquire(blocking=False):
            try:
                self._release()
            finally:
                self._lock.release()

    def flush(self, timeout: float) -> bool:
        """One full sync now, unstable files included; True when every local file is uploaded."""
        result: list[bool] = []
        worker = threading.Thread(target=lambda: result.append(self.sync_once(final=True)), daemon=True)
        worker.start()
        worker.join(timeout)
        return bool(result and result[0])

    def finish(self, timeout: float) -> bool:
        """The last sync, then the thread stops: True when every local file is uploaded."""
        done = self.flush(timeout)
        self.stop()
        return done

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sync_once()

    def _emit(self, event: str, fields: dict) -> None:
        if self.on_event is not None:
            try:
                self.on_event(event, fields)
            except Exception:
                pass

    def sync_once(self, final: bool = False) -> bool:
        """One sync round now (what the thread does every interval; `final`: unstable files too).
        Never raises; True when nothing failed and nothing is left to upload or delete."""
        with self._lock:
            try:
                return self._round(final)
            finally:
                if self._stop.is_set():  # stop() did not wait for this round: its descriptors go now
                    self._release()

    def _round(self, final: bool) -> bool:
        try:
            errors, pending = self._sync(final)
        except Exception as exc:  # listing the local dir, resolving the URI, ...
            errors, pending = [f"{type(exc).__name__}: {exc}"], -1
        if errors:
            self._failures += 1
            if self._failures == self.max_failures:
                self._emit("checkpoint_sync_failed", {"uri": self.uri, "failures": self._failures,
                                                      "error": errors[0][:500], "errors": len(errors)})
            return False
        if self._failures >= self.max_failures:
            self._emit("checkpoint_sync_recovered", {"uri": self.uri, "failures": self._failures})
        self._failures = 0
        return pending == 0

    def _scan(self) -> dict[str, Stat]:
        found: dict[str, Stat] = {}
        stack = [(self.local_dir, "")]
        while stack:
            top, rel = stack.pop()
            try:
                entries = list(os.scandir(top))
            except FileNotFoundError:
                continue
            for e in entries:
                if e.name.startswith(".nfs"):
                    continue  # NFS keeps a deleted file that is still open (ours, held) under such a name
                name = f"{rel}{e.name}"
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append((e.path, name + "/"))
                    elif e.is_file():
                        st = e.stat()
                        found[name] = _stat(st)
                except FileNotFoundError:
                    pass
        return found

    def _replaced_since(self, prev: dict[str, Stat], now: dict[str, Stat]) -> list[str]:
        """The files replaced since the previous scan, judged by the inode held open since then (HELD_FILES)
        or else the one that scan saw; then holds the files that changed in this one."""
        held = {rel: os.fstat(fd).st_ino for rel, fd in self._held.items()}
        self._release()
        replaced = [r for r, st in now.items() if held.get(r, prev[r][2] if r in prev else st[2]) != st[2]]
        for rel in [r for r, st in now.items() if prev.get(r) != st][:HELD_FILES]:
            try:
                # O_NONBLOCK: should a FIFO have taken the file's place, the open does not wait for a writer
                self._held[rel] = os.open(self.local_dir / rel, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                pass  # gone already, or unreadable: judged by its inode number then
        return replaced

    def _release(self) -> None:
        for fd in self._held.values():
            os.close(fd)
        self._held = {}

    def _sync(self, final: bool) -> tuple[list[str], int]:
        if not self.local_dir.is_dir():  # unmounted or not made yet: not a reason to delete remotely
            return [], 0
        now, prev = self._scan(), self._prev
        self._prev = now
        self._replaced = {r: self._replaced.get(r, 0) + 1 for r in self._replaced_since(prev, now)}
        fs, root = filesystem(self.uri)
        root = root.rstrip("/")
        errors: list[str] = []
        synced = self._synced

        def each(fn: Callable[[str], None], items: Iterable[str]) -> list[str]:
            items = list(items)
            if len(items) > 1:
                with ThreadPoolExecutor(min(WORKERS, len(items))) as pool:
                    outcome = list(pool.map(lambda r: _attempt(fn, r), items))
            else:
                outcome = [_attempt(fn, r) for r in items]
            errs = [e for e in outcome if e]
            errors.extend(errs)
            return [r for r, e in zip(items, outcome) if not e]

        def remove(rel: str) -> None:
            try:
                fs.rm_file(f"{root}/{rel}")
            except FileNotFoundError:
                pass
            synced.pop(rel, None)

        def upload(rel: str) -> None:
            try:
                if final or prev.get(rel) == now[rel]:
                    transfer.upload_file(self.local_dir / rel, join(self.uri, rel))
                    stat = now[rel]
                else:
                    stat = _upload_snapshot(self.local_dir / rel, join(self.uri, rel))
            except Exception:
                if (self.local_dir / rel).is_file():
                    raise
                return  # deleted while we looked: next scan sees it gone
            if stat is None:
                return  # written to while we copied it: the next round tries again
            synced[rel] = stat
            self._emit("checkpoint_uploaded", {"path": rel, "bytes": stat[0]})

        def settled(rel: str, st: Stat) -> bool:
            return final or prev.get(rel) == st or self._replaced.get(rel, 0) >= STARVED_SCANS

        ready = [r for r, st in now.items() if synced.get(r) != st and settled(r, st)]
        files: list[str] = []
        later: dict[str, list[str]] = {}
        for r in ready:
            if (key := self.last(r)) is not None:
                later.setdefault(key, []).append(r)
            elif not _marked_dir(r):
                files.append(r)
        gone = [r for r in synced if r not in now]

        # A. Before files of a remotely marked directory change, take its remote marker away; then
        # delete what went away locally, except whole checkpoints whose marker went away (see C).
        touched = {
            d for m in synced if (d := _marked_dir(m))
            and (any(_under(r, d) for r in files) or (m in now and any(_under(r, d) for r in gone)))
        }
        kept = set(touched) - set(_marked_dir(m) for m in each(remove, [f"{d}/{MARKER}" for d in touched]))
        files = [r for r in files if not any(_under(r, d) for d in kept)]
        gone_dirs = {d for r in gone if (d := _marked_dir(r)) and r in synced}
        each(remove, [r for r in gone if r in synced and not _marked_dir(r)
                      and not any(_under(r, d) for d in kept | gone_dirs)])

        # B. Files, then markers (deepest first) whose directory is fully uploaded, then the `last` files.
        each(upload, files)
        ready = [r for r, st in now.items() if synced.get(r) != st and settled(r, st)]
        for m in sorted((r for r in ready if _marked_dir(r)), key=lambda r: -r.count("/")):
            d = _marked_dir(m)
            group = [r for r in synced.keys() | now.keys() if _under(r, d) and r != m]
            if all(synced.get(r) == now.get(r) for r in group):
                each(upload, [m])
        for key in sorted(later, key=_natural) if not errors else []:
            if len(each(upload, later[key])) < len(later[key]):
                break

        # C. A checkpoint whose marker went away locally (rotation) stays remote while a newer marked
        # directory is not yet complete there, so the remote always keeps one; then marker first.
        if not any(_marked_dir(r) and synced.get(r) != st for r, st in now.items()):
            for m in each(remove, [f"{d}/{MARKER}" for d in gone_dirs]):
                each(remove, [r for r in list(synced) if _under(r, _marked_dir(m)) and r not in now])

        pending = sum(synced.get(r) != st for r, st in now.items()) + sum(r not in now for r in synced)
        return errors, pending


def _stat(st: os.stat_result) -> Stat:
    return st.st_size, st.st_mtime_ns, st.st_ino


def _upload_snapshot(local: Path, uri: str) -> Stat | None:
    """Upload a file that keeps being replaced: copy what one open descriptor reads (a rename over the
    path never disturbs it) and keep the copy only if that file did not change while it was read.
    Returns the stat uploaded, or None."""
    with open(local, "rb") as src:
        before = os.fstat(src.fileno())
        fd, tmp = tempfile.mkstemp(prefix=".shipyard-snapshot-")
        try:
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            after = os.fstat(src.fileno())
            if _stat(before) != _stat(after):
                return None
            transfer.upload_file(Path(tmp), uri)
        finally:
            Path(tmp).unlink(missing_ok=True)
    return _stat(before)


def _attempt(fn: Callable[[str], None], rel: str) -> str | None:
    try:
        fn(rel)
        return None
    except Exception as exc:
        return f"{rel}: {type(exc).__name__}: {exc}"
