"""Shared storage is not assumed: an instance's files live on its node, and the controller keeps a
copy of each at the path it reads (the same paths as the local backend's). The node side answers
`pull(offsets)` with the bytes added since; the controller side appends them. The host log and the
events file only grow, so an offset is all either side needs; heartbeats are small files that are
replaced, so each is sent whole when it changed. The model and output directories are sent once, as a
tarball, when the agent has exited."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

# One pull carries at most this much per stream; a larger backlog comes in the next pulls at once.
PULL_LIMIT = 4 << 20
ARTIFACT_DIRS = ("model", "output")


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


def pack_artifacts(ml_dir: Path) -> bytes:
    """ml/model and ml/output (success or failure, and output/data) as one tar.gz."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in ARTIFACT_DIRS:
            if (ml_dir / name).is_dir():
                tar.add(ml_dir / name, arcname=name)
    return buffer.getvalue()


# -- the controller's side ------------------------------------------------------------------------
class Mirror:
    """The controller's copy of one instance's host log, events file, heartbeats and artifacts."""

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
        """A line of the platform's own in the host log (where `shipyard logs` and failure reasons look)."""
        _append(self.log_path, f"shipyard-ray: {message}\n".encode())

    def apply_artifacts(self, data: bytes) -> None:
        from shipyard.storage.archive import safe_extract

        self.ml_dir.mkdir(parents=True, exist_ok=True)
        staging = self.ml_dir.parent / "artifacts-from-node.tar.gz"
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
