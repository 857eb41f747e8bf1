"""Copy objects between any fsspec URI and local directories."""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

from shipyard.errors import StorageError, ValidationError
from shipyard.storage.uri import filesystem

WORKERS = 8
CHUNK = 8 * 1024 * 1024


def _is_local_fs(fs) -> bool:
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else fs.protocol
    return "file" in protocols


def _sizes(uri: str) -> tuple[object, str, bool, dict[str, int]]:
    """(fs, root, root is a single file, {relative key: size}) for everything under `uri`."""
    fs, root = filesystem(uri)
    try:
        if not fs.exists(root):
            raise StorageError(f"{uri} does not exist")
        if fs.isfile(root):
            return fs, root, True, {posixpath.basename(root): fs.size(root)}
        found = fs.find(root, detail=True)
    except OSError as exc:
        raise StorageError(f"could not list {uri}: {exc}") from exc
    prefix = root.rstrip("/") + "/"
    sizes = {}
    for name, info in found.items():
        # Zero-byte "folder" markers some S3 tools create are not objects anyone wants.
        if info.get("type") == "directory" or name.endswith("/") or not name.startswith(prefix):
            continue
        sizes[name[len(prefix):]] = int(info.get("size") or 0)
    return fs, root, False, dict(sorted(sizes.items()))


def list_objects(uri: str) -> list[str]:
    """Sorted relative keys of every file under `uri`; [basename] when `uri` names one file."""
    return list(_sizes(uri)[3])


def shard(keys: Sequence[str], host_index: int, host_count: int) -> list[str]:
    """This host's share of `keys` under ShardedByS3Key: round robin over the sorted keys."""
    if host_count < 1:
        raise ValidationError("host_count", host_count, "must be at least 1")
    if not 0 <= host_index < host_count:
        raise ValidationError("host_index", host_index, f"must be in 0..{host_count - 1} (0-based)")
    return sorted(keys)[host_index::host_count]


def _target(dest: Path, key: str) -> Path:
    parts = PurePosixPath(key).parts
    if not key or key.startswith("/") or "\\" in key or ".." in parts or os.path.isabs(key):
        raise StorageError(f"refusing to download key {key!r}: it would be written outside {dest}")
    return dest.joinpath(*parts)


def download(
    uri: str,
    dest: Path,
    keys: Sequence[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Copy `keys` (default: all) under `uri` into `dest`, keeping relative paths; returns bytes.

    `progress(done, total)` is called from worker threads, but never concurrently."""
    fs, root, single, sizes = _sizes(uri)
    dest = Path(dest)
    wanted = list(sizes) if keys is None else list(keys)
    targets = {key: _target(dest, key) for key in wanted}  # all checked before anything is written
    missing = [k for k in wanted if k not in sizes]
    if missing:
        raise StorageError(f"{uri}: no object(s) {', '.join(missing[:5])}")
    total = sum(sizes[k] for k in wanted)
    done = 0
    lock = threading.Lock()
    dest.mkdir(parents=True, exist_ok=True)
    if progress:
        progress(0, total)

    def advance(n: int) -> None:
        nonlocal done
        with lock:
            done += n
            if progress:
                progress(done, total)

    def fetch(key: str) -> None:
        source = root if single else f"{root.rstrip('/')}/{key}"
        target = targets[key]
        target.parent.mkdir(parents=True, exist_ok=True)
        # Write beside the target and rename, so no reader sees a half-written file.
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out, fs.open(source, "rb") as src:
                while chunk := src.read(CHUNK):
                    out.write(chunk)
                    advance(len(chunk))
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    _run_all(fetch, wanted, f"download from {uri}")
    return done


def _run_all(work: Callable[[str], None], items: list, what: str) -> None:
    try:
        if len(items) <= 1:
            for item in items:
                work(item)
            return
        with ThreadPoolExecutor(max_workers=min(WORKERS, len(items))) as pool:
            for future in [pool.submit(work, item) for item in items]:
                future.result()
    except StorageError:
        raise
    except OSError as exc:
        raise StorageError(f"{what} failed: {exc}") from exc


def _put(fs, local: Path, path: str) -> None:
    if _is_local_fs(fs):
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out, open(local, "rb") as src:
                shutil.copyfileobj(src, out, CHUNK)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    else:
        # One PUT (or one completed multipart upload) is atomic on S3.
        fs.put_file(str(local), path)


def upload_file(local: Path, uri: str) -> None:
    """Copy one local file to `uri`; readers see the old object or the whole new one."""
    local = Path(local)
    if not local.is_file():
        raise StorageError(f"cannot upload {local}: not a file")
    fs, path = filesystem(uri)
    _run_all(lambda _: _put(fs, local, path), [uri], f"upload of {local} to {uri}")


def upload_dir(local: Path, uri: str) -> int:
    """Copy every file under `local` to `uri`/<relpath>; returns bytes."""
    local = Path(local)
    if not local.is_dir():
        raise StorageError(f"cannot upload {local}: not a directory")
    # Symlinked files are sent as their content; symlinked directories are not descended (cycles).
    files = sorted(
        Path(top, name) for top, _, names in os.walk(local) for name in names if Path(top, name).is_file()
    )
    fs, root = filesystem(uri)
    root = root.rstrip("/")

    def send(file: Path) -> None:
        _put(fs, file, f"{root}/{file.relative_to(local).as_posix()}")

    _run_all(send, files, f"upload of {local} to {uri}")
    return sum(p.stat().st_size for p in files)
