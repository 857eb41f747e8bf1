"""Shared storage is not assumed: an instance's files live on its node, and the controller keeps a
copy of each at the path it reads (the same paths as the local backend's). The node side answers
`pull(offsets)` with the bytes added since; the controller side appends them. The host log and the
events file only grow, so an offset is all either side needs; heartbeats are small files that are
replaced, so each is sent whole when it changed.

The model and output data never come here: when the agent has exited, the node uploads its share of each
of the job's tarballs itself (storage/archive.py), and the controller assembles the tarballs from the
shares in storage. Only ml/output's own files (failure, success) are sent, for the controller's copy."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

# One pull carries at most this much per stream; a larger backlog comes in the next pulls at once.
PULL_LIMIT = 4 << 20


# -- the node's side ------------------------------------------------------------------------------
def read_from(path: str, offset: int, limit: int = PULL_LIMIT) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(limit)
    except FileNotFoundError:
        return b""


def changed_files(directory: str | None, seen: dict[str, int]) -> dict[str, bytes]:
    """Heartbeat files whose modification time is not the one in `seen` (name -> st_mtime_ns), which
    is updated."""
    if not directory:
        return {}
    changed = {}
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return {}
    for entry in entries:
        if not entry.name.endswith(".json"):
            continue
        try:
            stamp = entry.stat().st_mtime_ns
            if seen.get(entry.name) != stamp:
                changed[entry.name] = Path(entry.path).read_bytes()
                seen[entry.name] = stamp
        except OSError:
            continue  # replaced while we looked: the next pull gets it
    return changed


def share_artifacts(ml_dir: Path, uri: str, log_path: str) -> dict[str, dict]:
    """This host's share of each of the job's tarballs, uploaded to `uri`/<tarball> from this node, its
    progress written to the host log: {tarball: {"uri", "names", "bytes", "crc", "length"}} for those it
    has files for (`names` in the share's order; the CRC-32 and length of its uncompressed bytes)."""
    from shipyard.storage import archive, transfer
    from shipyard.storage import uri as uris

    shares = {}
    for name, subdir in archive.ARTIFACTS.items():
        files = archive.collect([ml_dir / subdir])
        if not files:
            continue
        local = ml_dir.parent / f"share-{name}"
        try:
            crc, length = archive.write_share(local, files)
            size = local.stat().st_size
            destination = uris.join(uri, name)
            transfer.upload_file(local, destination, progress=_progress_to(log_path, f"upload {name} share"))
        finally:
            local.unlink(missing_ok=True)
        shares[name] = {"uri": destination, "names": sorted(files), "bytes": size, "crc": crc, "length": length}
    return shares


def _progress_to(log_path: str, what: str):
    """A transfer's progress as host log lines, every PROGRESS_SECONDS and once done."""
    import time

    from shipyard.storage.transfer import PROGRESS_SECONDS, progress_line

    started = last = time.monotonic()

    def report(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if done >= total or now - last >= PROGRESS_SECONDS:
            last = now
            note(log_path, progress_line(what, done, total, now - started))
    return report


def pack_output_files(ml_dir: Path) -> bytes:
    """ml/output's own files (failure, success: what the controller reads), not its directories."""
    output = ml_dir / "output"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for entry in sorted(os.scandir(output), key=lambda e: e.name) if output.is_dir() else ():
            if entry.is_file(follow_symlinks=False):
                tar.add(entry.path, arcname=f"output/{entry.name}")
    return buffer.getvalue()


def note(log_path: str, message: str) -> None:
    """A line of the platform's own in the host log (where `shipyard logs` and failure reasons look)."""
    _append(log_path, f"shipyard-ray: {message}\n".encode())


# -- the controller's side ------------------------------------------------------------------------
class Mirror:
    """The controller's copy of one instance's host log, events file, heartbeats and ml/output's files."""

    def __init__(self, log_path: str, events_path: str, heartbeat_dir: str | None, ml_dir: Path) -> None:
        self.log_path, self.events_path = log_path, events_path
        self.heartbeat_dir, self.ml_dir = heartbeat_dir, ml_dir
        self.log_offset = self.events_offset = 0   # bytes received from the node so far

    def offsets(self) -> tuple[int, int]:
        return self.log_offset, self.events_offset

    def apply(self, log: bytes, events: bytes, heartbeats: dict[str, bytes]) -> None:
        self.log_offset += _append(self.log_path, log)
        self.events_offset += _append(self.events_path, events)
        if heartbeats and self.heartbeat_dir:
            os.makedirs(self.heartbeat_dir, exist_ok=True)
            for name, data in heartbeats.items():
                tmp = Path(self.heartbeat_dir) / f".{name}.tmp"
                tmp.write_bytes(data)
                os.replace(tmp, Path(self.heartbeat_dir) / name)

    def note(self, message: str) -> None:
        note(self.log_path, message)

    def apply_output_files(self, data: bytes) -> None:
        from shipyard.storage.archive import safe_extract

        self.ml_dir.mkdir(parents=True, exist_ok=True)
        staging = self.ml_dir.parent / "output-files-from-node.tar.gz"
        staging.write_bytes(data)
        try:
            safe_extract(staging, self.ml_dir)
        finally:
            staging.unlink()


def _append(path: str, data: bytes) -> int:
    if not data:
        return 0
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    return len(data)
