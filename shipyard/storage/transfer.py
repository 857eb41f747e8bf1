"""Copy objects between any fsspec URI and local directories, and say how a copy is getting on."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import itertools
import os
import posixpath
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import TypeVar

from shipyard.errors import StorageError, ValidationError
from shipyard.storage.uri import filesystem, storage_problem

WORKERS = 8
CHUNK = 8 * 1024 * 1024
RANGE = 32 * 1024 * 1024   # an object larger than two of these is fetched in ranges, side by side
S3_MIN_PART = 5 << 20      # S3's smallest part of a multipart upload (but the last)
S3_MAX_COPY = 5 << 30      # and its largest part copy
PAGE = 1000                # keys in an S3 listing's page: the most S3 returns
# rich's DownloadColumn's units, so that a line and a progress bar give sizes alike.
SIZE_UNITS = ["bytes", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"]

Progress = Callable[[int, int], None]   # (bytes done, bytes in all)
PROGRESS_SECONDS = 2.0   # how often a transfer's progress is logged (and recorded), besides start and end
# What progress_line writes, found in a longer line (a log's).
PROGRESS_LINE = re.compile(r"\w+ [^:]*: [\d,.]+ of [\d,.]+ \w+ \(\d+%\)")


def progress_line(what: str, done: int, total: int, seconds: float) -> str:
    """A transfer's progress as logs show it, `seconds` after it started:
    `download train: 120.0 of 300.0 MB (40%), 48.1 MB/s, 0:00:04 left` (`done in 0:00:06` once complete),
    in rich's progress columns' units and time format."""
    from rich import filesize

    unit, suffix = filesize.pick_unit_and_suffix(total, SIZE_UNITS, 1000)
    places = 0 if unit == 1 else 1
    line = f"{what}: {done / unit:,.{places}f} of {total / unit:,.{places}f} {suffix} ({100 * done // max(total, 1)}%)"
    if seconds <= 0:   # its first report: no rate yet
        return line
    rate = done / seconds
    line += f", {filesize.decimal(int(rate))}/s"
    if done >= total:
        return f"{line}, done in {dt.timedelta(seconds=round(seconds))}"
    return f"{line}, {dt.timedelta(seconds=round((total - done) / rate))} left" if rate else line


def _speaks(fs, protocol: str) -> bool:
    return protocol in ((fs.protocol,) if isinstance(fs.protocol, str) else fs.protocol)


Listing = tuple[object, str, bool, dict[str, tuple[int, str]]]
T = TypeVar("T")


def listing(uri: str, opener: Callable = filesystem) -> Listing:
    """(fs, root, root is a single file, {relative key: (size, identity)}) for everything under `uri`. The
    identity (an ETag, else a modification time) tells whether an object changed since it was copied.
    `opener`: what gives (fs, root) for `uri` (uri.reader: a file system for reads only)."""
    fs, root, single, listed = paged_listing(uri, opener)
    return fs, root, single, {key: value for page in listed for key, value in page.items()}


def paged_listing(uri: str, opener: Callable = filesystem) -> tuple[object, str, bool, Iterator[dict]]:
    """listing's, the objects a page at a time, each next page listed while the one before is used (lazy
    files make a page's files meanwhile)."""
    fs, root = opener(uri)
    listed = _ahead(pages(fs, root))
    first = next(listed, None)
    if first is not None:
        return fs, root, False, itertools.chain([first], listed)
    try:
        if fs.isfile(root):
            info = fs.info(root)
            return fs, root, True, iter([{posixpath.basename(root): (int(info.get("size") or 0), identity(info))}])
        if not fs.exists(root):
            raise StorageError(f"{uri} does not exist")
    except OSError as exc:
        raise StorageError(f"could not list {uri}: {exc}") from exc
    return fs, root, False, iter([])


def _ahead(items: Iterator[T]) -> Iterator[T]:
    """`items`, each next one fetched in a thread while the one before is used."""
    with ThreadPoolExecutor(1, thread_name_prefix="listing") as pool:
        coming = pool.submit(next, items, None)
        while (item := coming.result()) is not None:
            coming = pool.submit(next, items, None)
            yield item


def pages(fs, root: str, first: int = PAGE) -> Iterator[dict[str, tuple[int, str]]]:
    """Every object under the folder-like `root` of `fs` as {relative key: (size, identity)}, in key order,
    a page at a time: S3's own pages, the first one of `first` keys (a stream starts on a small one while
    the rest is listed), any other file system's listing as one page. Nothing when there is nothing under it."""
    prefix = root.rstrip("/") + "/"
    try:
        if _speaks(fs, "s3"):
            yield from _s3_pages(fs, prefix, first)
            return
        found = fs.find(root, detail=True)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageError(f"could not list {fs.unstrip_protocol(root)}: {exc}") from exc
    objects = {}
    for name, info in found.items():
        # Zero-byte "folder" markers some S3 tools create are not objects anyone wants.
        if info.get("type") == "directory" or name.endswith("/") or not name.startswith(prefix):
            continue
        objects[name[len(prefix):]] = (int(info.get("size") or 0), identity(info))
    if objects:
        yield dict(sorted(objects.items()))


def _s3_pages(fs, prefix: str, first: int) -> Iterator[dict[str, tuple[int, str]]]:
    # ListObjectsV2 returns keys in UTF-8 byte order, which is Python's str order: each page follows the last.
    bucket, key, _ = fs.split_path(prefix)
    start = key.rstrip("/") + "/" if key else ""
    request = {"Bucket": bucket, "Prefix": start, "MaxKeys": first}
    while True:
        page = fs.call_s3("list_objects_v2", **request)
        objects = {item["Key"][len(start):]: (int(item.get("Size") or 0), identity(item))
                   for item in page.get("Contents", ()) if not item["Key"].endswith("/")}
        if objects:
            yield objects
        if not page.get("IsTruncated") or not page.get("NextContinuationToken"):
            return
        request.update(ContinuationToken=page["NextContinuationToken"], MaxKeys=PAGE)


def identity(info: dict) -> str:
    """What tells whether an object changed since it was listed: its ETag, else a modification time."""
    return str(info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified") or "")


def list_objects(uri: str) -> list[str]:
    """Sorted relative keys of every file under `uri`; [basename] when `uri` names one file."""
    return list(listing(uri)[3])


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
    progress: Progress | None = None,
    reuse: Sequence[tuple[Path, dict[str, list]]] = (),
    record: Callable[[str, int, str, bool], None] | None = None,
    listed: Listing | None = None,
) -> int:
    """Copy `keys` (default: all) under `uri` into `dest`, keeping relative paths; returns bytes copied.

    Objects are fetched side by side, and one larger than two RANGEs in ranges side by side, each written
    at its offset. `reuse`: earlier copies, (directory, {key: [size, identity]}): an object one of them holds
    unchanged is linked from it, not fetched again. `record(key, size, identity, linked)` is told of each
    object as it is complete in `dest` (what a later `reuse` reads). `listed`: `listing(uri)`, when the
    caller has it already. `progress(done, total)` counts the bytes still to
    fetch; it is called from worker threads, but never concurrently."""
    fs, root, single, objects = listed or listing(uri)
    dest = Path(dest)
    wanted = list(objects) if keys is None else list(keys)
    targets = {key: _target(dest, key) for key in wanted}  # all checked before anything is written
    missing = [k for k in wanted if k not in objects]
    if missing:
        raise StorageError(f"{uri}: no object(s) {', '.join(missing[:5])}")
    dest.mkdir(parents=True, exist_ok=True)
    fetch_keys = [key for key in wanted if not _reused(key, objects[key], targets[key], reuse, record)]
    total = sum(objects[k][0] for k in fetch_keys)
    done = 0
    lock = threading.Lock()
    if progress:
        progress(0, total)

    def advance(n: int) -> None:
        nonlocal done
        with lock:
            done += n
            if progress:
                progress(done, total)

    # Every object's partial file is made (at its full size) before any range is written into it; it is
    # renamed over the target once its last range is in, so no reader sees a half-written file.
    parts: dict[str, Path] = {}
    left: dict[str, int] = {}
    pieces: list[tuple[str, int, int]] = []
    try:
        for key in fetch_keys:
            size = objects[key][0]
            target = targets[key]
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
            os.ftruncate(fd, size)
            os.close(fd)
            parts[key] = Path(tmp)
            spans = [(start, min(start + RANGE, size)) for start in range(0, size, RANGE)] if size > 2 * RANGE \
                else [(0, size)]
            left[key] = len(spans)
            pieces += [(key, start, end) for start, end in spans]

        def fetch(piece: tuple[str, int, int]) -> None:
            key, start, end = piece
            source = root if single else f"{root.rstrip('/')}/{key}"
            fd = os.open(parts[key], os.O_WRONLY)
            try:
                with open_listed(fs, source, *objects[key]) as src:
                    src.seek(start)
                    offset = start
                    while offset < end:
                        try:
                            chunk = src.read(min(CHUNK, end - offset))
                        except OSError as exc:   # a range past its end, or an ETag it no longer has (s3fs)
                            if exc.errno not in (errno.EINVAL, errno.EBUSY):
                                raise
                            chunk = b""
                        if not chunk:   # shorter than listed: changed meanwhile; never keep wrong bytes
                            raise StorageError(f"{source} changed while it was downloaded (ended at byte "
                                               f"{offset} of {objects[key][0]}); start again")
                        os.pwrite(fd, chunk, offset)
                        offset += len(chunk)
                        advance(len(chunk))
            finally:
                os.close(fd)
            with lock:
                left[key] -= 1
                complete = left[key] == 0
            if complete:
                os.replace(parts[key], targets[key])
                if record:
                    record(key, *objects[key], False)

        _run_all(fetch, pieces, f"download from {uri}")
    finally:
        for part in parts.values():
            part.unlink(missing_ok=True)
    return done


def open_listed(fs, path: str, size: int, identity: str, **how):
    """`path` on `fs` open for reading as its listing gave it (`size`, `identity`): no HEAD first, and on S3
    every range read asks for the listing's ETag, so an object changed since fails the read (s3fs's
    FileExpired, s3lite's ObjectChanged) rather than mixing old bytes and new. `how`: more of fs.open's
    options."""
    if hasattr(fs, "open_listed"):   # storage/s3lite.py's client: a GET per read, with If-Match
        return fs.open_listed(path, size, identity)
    src = fs.open(path, "rb", block_size=CHUNK, size=size, **how)
    if not _speaks(fs, "file"):
        src.details = {"name": path, "type": "file", "size": size, "ETag": identity}
        if identity and hasattr(src, "read_kw"):   # s3fs sends If-Match itself only after a HEAD of its own
            src.read_kw = {**src.read_kw, "IfMatch": identity}
    return src


def read_listed(fs, path: str, size: int, identity: str, start: int, end: int) -> bytes:
    """Bytes `start` to `end` of `path` as its listing gave it (`size`, `identity`): one GET of exactly that
    range, guarded by the listing's ETag on S3; StorageError when fewer come (the object changed)."""
    with open_listed(fs, path, size, identity, cache_type="none") as src:
        src.seek(start)
        data = src.read(end - start)
    if len(data) != end - start:
        raise StorageError(f"it ended at byte {start + len(data)} but was listed with {size} bytes (changed "
                           "since it was listed?)")
    return data


def _reused(key: str, listed: tuple[int, str], target: Path, reuse, record) -> bool:
    """Link `key` from an earlier copy that holds it unchanged; False when none does."""
    for directory, manifest in reuse:
        source = Path(directory) / key
        if manifest.get(key) == list(listed) and source.is_file() and source.stat().st_size == listed[0]:
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)
            except OSError:
                shutil.copyfile(source, target)
            if record:
                record(key, *listed, True)
            return True
    return False


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


def _put(fs, local: Path, path: str, progress: Progress | None = None) -> None:
    if _speaks(fs, "file"):
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out, open(local, "rb") as src:
                total, done = os.fstat(src.fileno()).st_size, 0
                report = progress or (lambda done, total: None)
                report(0, total)
                while chunk := src.read(CHUNK):
                    out.write(chunk)
                    done += len(chunk)
                    report(done, total)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    else:
        from fsspec.callbacks import DEFAULT_CALLBACK, Callback

        # One PUT (or one completed multipart upload) is atomic on S3.
        fs.put_file(str(local), path, callback=DEFAULT_CALLBACK if progress is None else
                    Callback(hooks={"progress": lambda size, value, **_: progress(value, size or 0)}))


def upload_file(local: Path, uri: str, progress: Progress | None = None) -> None:
    """Copy one local file to `uri`; readers see the old object or the whole new one. `progress(done,
    total)` is told the bytes sent as they go."""
    local = Path(local)
    if not local.is_file():
        raise StorageError(f"cannot upload {local}: not a file")
    fs, path = filesystem(uri)
    _run_all(lambda _: _put(fs, local, path, progress), [uri], f"upload of {local} to {uri}")


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


Piece = str | tuple[str, int] | bytes   # an object, an object from an offset on, or bytes given here


def concatenate(pieces: Sequence[Piece], uri: str, progress: Progress | None = None) -> int:
    """`uri` becomes `pieces` one after the other: objects (URIs on its store, whole or from an offset) and
    bytes given here; returns its size. On S3 the objects' bytes stay there (part copies of a multipart
    upload); elsewhere they are streamed through this process a chunk at a time. Readers see the old
    object or the whole new one."""
    fs, path = filesystem(uri)
    objects = [piece if isinstance(piece, str) else piece[0] for piece in pieces if not isinstance(piece, bytes)]
    try:
        spans: list[tuple[str | bytes, int, int]] = []   # (object's path or bytes, start, end)
        for piece in pieces:
            if isinstance(piece, bytes):
                spans.append((piece, 0, len(piece)))
            else:
                source, start = (piece, 0) if isinstance(piece, str) else piece
                source = filesystem(source)[1]
                spans.append((source, start, fs.size(source)))
        total = sum(end - start for _, start, end in spans)
        report = progress or (lambda done, total: None)
        report(0, total)
        assemble = _s3_concatenate if _speaks(fs, "s3") else _stream_concatenate
        assemble(fs, spans, path, lambda done: report(done, total))
    except Exception as exc:  # botocore's and s3fs's errors have no common base to name
        raise StorageError(f"could not assemble {uri} from {', '.join(objects) or 'nothing'}: "
                           f"{storage_problem(exc)}") from exc
    return total


def _s3_concatenate(fs, spans: list[tuple[str | bytes, int, int]], path: str, advance: Callable[[int], None]) -> None:
    """S3 wants every part but the last to be at least S3_MIN_PART long: what is shorter is read here and
    sent with what follows it, so at most twice that is held here whatever the sizes."""
    bucket, key, _ = fs.split_path(path)
    upload = fs.call_s3("create_multipart_upload", Bucket=bucket, Key=key)["UploadId"]
    parts: list[dict] = []
    buffer = bytearray()
    done = 0

    def part(size: int, **how) -> None:
        nonlocal done
        answer = fs.call_s3(f"upload_part{'_copy' if 'CopySource' in how else ''}", Bucket=bucket, Key=key,
                            UploadId=upload, PartNumber=len(parts) + 1, **how)
        parts.append({"PartNumber": len(parts) + 1, "ETag": answer.get("CopyPartResult", answer)["ETag"]})
        done += size
        advance(done)

    def take(data: bytes) -> None:
        buffer.extend(data)
        if len(buffer) >= S3_MIN_PART:
            part(len(buffer), Body=bytes(buffer))
            buffer.clear()

    try:
        for source, offset, size in spans:
            if isinstance(source, bytes):
                take(source)
                continue
            if buffer:   # topped up to a part's minimum from this object
                top_up = min(size, offset + S3_MIN_PART - len(buffer))
                take(fs.cat_file(source, start=offset, end=top_up))
                offset = top_up
            while size - offset >= S3_MIN_PART:
                end = size if size - offset <= S3_MAX_COPY else min(offset + S3_MAX_COPY, size - S3_MIN_PART)
                part(end - offset, CopySource=source, CopySourceRange=f"bytes={offset}-{end - 1}")
                offset = end
            if offset < size:
                take(fs.cat_file(source, start=offset, end=size))
        if buffer or not parts:   # the last part, of any size
            part(len(buffer), Body=bytes(buffer))
        fs.call_s3("complete_multipart_upload", Bucket=bucket, Key=key, UploadId=upload,
                   MultipartUpload={"Parts": parts})
    except BaseException:
        with contextlib.suppress(Exception):
            fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload)
        raise
    finally:
        fs.invalidate_cache(path)


def _stream_concatenate(fs, spans: list[tuple[str | bytes, int, int]], path: str,
                        advance: Callable[[int], None]) -> None:
    local = _speaks(fs, "file")
    if local:   # written aside and moved into place: readers never see it half written
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fd, target = tempfile.mkstemp(dir=Path(path).parent, prefix=f".{Path(path).name}.", suffix=".part")
        os.close(fd)
    else:
        target = path
    done = 0
    try:
        with fs.open(target, "wb") as out:
            for source, offset, _ in spans:
                if isinstance(source, bytes):
                    out.write(source)
                    done += len(source)
                    continue
                with fs.open(source, "rb") as src:
                    src.seek(offset)
                    while chunk := src.read(CHUNK):
                        out.write(chunk)
                        done += len(chunk)
                        advance(done)
        if local:
            os.replace(target, path)
    except BaseException:
        if local:
            Path(target).unlink(missing_ok=True)
        raise
