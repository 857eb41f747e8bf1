"""Pipe input mode, the streaming side (SageMaker's Pipe mode, docs/input-modes.md): in the agent, one thread
per channel writes each epoch's objects into a FIFO `<data_dir>/<channel>_<epoch>` that the script reads.

One epoch's FIFO exists at a time: `<channel>_<e+1>` is made once the reader has taken every byte of
`<channel>_<e>` or closed it early. Objects are fetched in ranges of `chunk_size` bytes, up to `ahead` ranges
before the one being written, so memory stays near ahead x chunk_size whatever the object sizes. Fetching
starts when the FIFO is made, not when its reader opens it, and an epoch's first range is small
(FIRST_RANGE): the reader's first read finds bytes waiting, or waits for one small GET. A range
that still fails after retries (each from the same offset: no byte is skipped or repeated) ends the channel:
`on_error` is told and the FIFO is closed after the last correct byte.

RecordIO wraps each object (or augmented attribute) in one whole record (cflag 0). An object larger than a
record holds (2^29 - 1 bytes) is refused, not split: MXNet's reader joins split parts with its magic word
between them, SageMaker's TensorFlow reader without, so no split reads back right in both."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import posixpath
import random
import select
import struct
import tempfile
import termios
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from shipyard.errors import StorageError, ValidationError
from shipyard.runtime.config import ChannelSource
from shipyard.storage import transfer
from shipyard.storage.manifest import check_objects, read_augmented, read_manifest
from shipyard.storage.uri import reader

CHUNK = 8 * 1024 * 1024
FIRST_PAGE = 100            # keys in the listing's first page: the first epoch starts on it
FIRST_RANGE = 1024 * 1024   # an epoch's first GET: not queued behind `ahead` full chunks
AHEAD = 8
BACKOFF = (0.2, 0.5, 1.0)   # seconds before each new try of a failed read
POLL = 0.05                 # how often a writer waiting for its reader to read looks for stop()
PIPE_BUFFER = 1024 * 1024   # Linux's default cap for an unprivileged pipe (fs.pipe-max-size)
RECORDIO_MAGIC = 0xCED7230A
RECORD_MAX = (1 << 29) - 1  # the length field's 29 bits
WRAPPINGS = (None, "None", "RecordIO")
COMPRESSIONS = (None, "None", "Gzip")
DATA_TYPES = ("S3Prefix", "ManifestFile", "AugmentedManifestFile")

T = TypeVar("T")


def epoch_items(items: Sequence[T], epoch: int, seed: int | None, host_index: int, host_count: int,
                sharded: bool) -> list[T]:
    """What this host streams in `epoch`, in order: `items` (sorted keys, manifest entries or augmented
    lines), shuffled with a seed by random.Random(f"{seed}:{epoch}") (a str seed is hashed with SHA-512, so
    every host and process agrees), then for ShardedByS3Key dealt round robin by host index. Without a
    seed that is transfer.shard over the sorted keys (File mode's share); with one a host's share changes
    from epoch to epoch, while each epoch's shares stay disjoint and cover every item."""
    order = list(items)
    if seed is not None:
        random.Random(f"{seed}:{epoch}").shuffle(order)
    if not sharded:
        return order
    return [order[i] for i in transfer.shard(range(len(order)), host_index, host_count)]


@dataclass(eq=False)
class _Part:
    """What the reader gets as one record under RecordIO: an object, or an inline augmented attribute."""

    label: str                       # how errors name it
    fs: object = None
    path: str = ""
    size: int | None = None          # from the listing; None until asked (an augmented '-ref')
    identity: str = ""               # the listing's ETag: a range of an object changed since is refused
    data: bytes | None = None        # an inline attribute's bytes
    error: StorageError | None = None  # why its size could not be learned


class _Ended(Exception):
    """The stream ends with nothing (more) to report: stop() was called, or the failure was told already."""


def _source(channel: ChannelSource) -> tuple[Iterable, Callable[[object], list[_Part]]]:
    """The channel's items (what an epoch orders and shards) and the parts each item streams."""
    if channel.s3_data_type == "ManifestFile":
        prefix, keys = read_manifest(channel.uri)
        return keys, _objects_in(prefix, check_objects(prefix, keys))
    if channel.s3_data_type == "AugmentedManifestFile":
        names = channel.attribute_names
        lines = read_augmented(channel.uri, names)
        return lines, lambda line: [_attribute(line[name]) if name.endswith("-ref") else
                                    _Part(f"{name} (inline)", data=_inline(line[name])) for name in names]
    fs, root = reader(channel.uri)
    listed = _Listed(transfer.pages(fs, root, FIRST_PAGE))
    if listed.keys:
        return listed, _objects_in(channel.uri, listed.objects)
    try:  # a prefix naming one object, as File mode allows
        info = fs.info(root) if fs.isfile(root) else None
    except OSError as exc:
        raise StorageError(f"could not list {channel.uri}: {exc}") from exc
    if info is None:
        raise StorageError(f"no objects under {channel.uri}; check the channel's URI")
    name = posixpath.basename(root)
    return [name], _objects_in(channel.uri[: len(channel.uri) - len(name)],
                               {name: (int(info.get("size") or 0), transfer.identity(info))})


class _Listed:
    """A prefix's keys in order, listed a page at a time as they are iterated: the first epoch starts on the
    first page (without a shuffle or shards, which need every key)."""

    def __init__(self, pages: Iterator[dict[str, tuple[int, str]]]) -> None:
        self.keys: list[str] = []
        self.objects: dict[str, tuple[int, str]] = {}   # key: (size, identity)
        self._pages = pages
        self._next_page()

    def _next_page(self) -> bool:
        page = next(self._pages, None)
        if page is None:
            return False
        self.keys.extend(page)
        self.objects.update(page)
        return True

    def __iter__(self) -> Iterator[str]:
        i = 0
        while i < len(self.keys) or self._next_page():
            yield self.keys[i]
            i += 1


def _objects_in(prefix: str, listed: dict[str, tuple[int, str]]) -> Callable[[str], list[_Part]]:
    fs, root = reader(prefix)
    root = root.rstrip("/")
    return lambda key: [_Part(key, fs, f"{root}/{key}", *listed[key])]


def _attribute(uri: str) -> _Part:
    fs, path = reader(uri)
    return _Part(uri, fs, path)


def _inline(value: object) -> bytes:
    """An inline attribute as SageMaker streams it: a string as itself, anything else as JSON."""
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


def _unread(fd: int) -> int:
    """Bytes written into the pipe that its reader has not taken yet."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


class _Ahead:
    """The chunks of an epoch's objects, fetched in order up to `depth` chunks before the one written."""

    def __init__(self, pool: ThreadPoolExecutor, ranges: Iterator[tuple[_Part, int, int]],
                 fetch: Callable[[_Part, int, int], bytes], depth: int) -> None:
        self._pool, self._ranges, self._fetch, self._depth = pool, ranges, fetch, depth
        self._queue: deque[tuple[_Part, Future]] = deque()

    def fill(self, depth: int | None = None) -> None:
        """Fetches started until `depth` are waiting."""
        while len(self._queue) < (depth or self._depth) and (piece := next(self._ranges, None)):
            self._queue.append((piece[0], self._pool.submit(self._fetch, *piece)))

    def start(self, stopped: threading.Event) -> None:
        """The first range alone, then the rest: the reader's first bytes do not share the endpoint."""
        self.fill(1)
        while self._queue and not stopped.is_set() and wait([self._queue[0][1]], POLL).not_done:
            pass
        self.fill()

    def chunks(self, part: _Part, result: Callable[[Future], bytes]) -> Iterator[bytes]:
        """`part`'s chunks; every part before it must have been taken already."""
        self.fill()
        while self._queue and self._queue[0][0] is part:
            _, future = self._queue.popleft()
            self.fill()
            yield result(future)

    def cancel(self) -> None:
        for _, future in self._queue:
            future.cancel()


class PipeStreamer:
    """Streams one Pipe-mode channel, epoch after epoch, until stop() or a failure (told to `on_error`)."""

    def __init__(self, channel: ChannelSource, data_dir: Path, host_index: int, host_count: int,
                 on_error: Callable[[str], None], chunk_size: int = CHUNK, ahead: int = AHEAD) -> None:
        _check(channel, host_index, host_count)
        self.channel, self.data_dir, self.on_error = channel, Path(data_dir), on_error
        self.host_index, self.host_count = host_index, host_count
        self.chunk_size, self.ahead = chunk_size, ahead
        self.recordio = channel.record_wrapping == "RecordIO"
        self.gzip = channel.compression == "Gzip"
        self._stopped = threading.Event()
        self._fifo: Path | None = None
        self._thread = threading.Thread(target=self._run, name=f"pipe-{channel.name}", daemon=True)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """End the stream (a writer waiting for its reader included) and remove its FIFO."""
        self._stopped.set()
        release = self._release()
        self._thread.join(timeout)
        if release is not None:
            os.close(release)
        self._remove_fifo()

    def _release(self) -> int | None:
        """A read end of the current FIFO, held until the thread has ended: a writer waiting in open() for its
        reader returns, and then sees stop()."""
        fifo = self._fifo
        try:
            return os.open(fifo, os.O_RDONLY | os.O_NONBLOCK) if fifo is not None else None
        except OSError:
            return None

    def _run(self) -> None:
        name = self.channel.name
        pool = ThreadPoolExecutor(self.ahead, thread_name_prefix=f"pipe-{name}")
        try:
            items, parts_of = _source(self.channel)
            sharded, seed = self.channel.distribution == "ShardedByS3Key", self.channel.shuffle_seed
            for epoch in itertools.count():
                order = items if seed is None and not sharded else \
                    epoch_items(list(items), epoch, seed, self.host_index, self.host_count, sharded)
                self._epoch(pool, epoch, (part for item in order for part in parts_of(item)))
        except _Ended:
            pass
        except Exception as exc:  # also a library's own error: the script must not wait for a pipe forever
            self._report(exc)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            self._remove_fifo()

    def _epoch(self, pool: ThreadPoolExecutor, epoch: int, parts: Iterator[_Part]) -> None:
        fifo = self._make_fifo(epoch)
        for_fetch, for_write = itertools.tee(parts)
        ahead = _Ahead(pool, self._ranges(for_fetch), self._fetch, self.ahead)
        fd = None
        try:
            ahead.start(self._stopped)   # before the reader comes
            fd = self._open(fifo)
            for part in for_write:
                self._write_part(fd, part, ahead)
            self._drain(fd)
        except BrokenPipeError:
            pass  # the reader closed the pipe early: that ends the epoch
        except _Ended:
            raise
        except Exception as exc:
            self._report(exc)  # before the reader sees the end of its pipe
            raise _Ended from exc
        finally:
            ahead.cancel()
            if fd is not None:
                os.close(fd)
            self._remove_fifo()

    def _report(self, exc: Exception) -> None:
        if not self._stopped.is_set():  # a read cut short by stop() is no failure
            what = str(exc) if isinstance(exc, StorageError) else f"{type(exc).__name__}: {exc}"
            self.on_error(f"channel {self.channel.name}: {what}")

    # --- the FIFO -------------------------------------------------------------------------------------

    def _make_fifo(self, epoch: int) -> Path:
        if self._stopped.is_set():
            raise _Ended
        path = self.data_dir / f"{self.channel.name}_{epoch}"
        try:
            if path.is_fifo():  # left by an earlier agent of this instance
                path.unlink()
            os.mkfifo(path, 0o600)
        except OSError as exc:
            raise StorageError(f"cannot make the pipe {path}: {exc}") from exc
        self._fifo = path
        return path

    def _remove_fifo(self) -> None:
        fifo, self._fifo = self._fifo, None
        if fifo is not None:
            fifo.unlink(missing_ok=True)

    def _open(self, fifo: Path) -> int:
        """The FIFO's write end, once a reader has opened it (stop() opens one to end the wait); then
        non-blocking, so stop() is seen while the reader is slow."""
        if self._stopped.is_set():
            raise _Ended
        try:
            fd = os.open(fifo, os.O_WRONLY)
        except OSError as exc:
            raise StorageError(f"cannot open {fifo}: {exc}") from exc
        if self._stopped.is_set():
            os.close(fd)
            raise _Ended
        os.set_blocking(fd, False)
        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BUFFER)
        except OSError:
            pass  # a smaller buffer only means more wake-ups
        return fd

    def _write(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        poller = None
        while view:
            if self._stopped.is_set():
                raise _Ended
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                if poller is None:
                    poller = select.poll()
                    poller.register(fd, select.POLLOUT)
                poller.poll(POLL * 1000)

    def _drain(self, fd: int) -> None:
        """Return once the reader has taken every byte (or closed the pipe): the next epoch's pipe appears
        only after this one was read to its end."""
        poller = select.poll()
        poller.register(fd, 0)  # POLLERR, the reader closed, is reported whatever is asked
        while _unread(fd):
            if poller.poll(POLL * 1000):
                return
            if self._stopped.is_set():
                raise _Ended

    # --- reading objects ------------------------------------------------------------------------------

    def _error(self, part: _Part, what: str) -> StorageError:
        return StorageError(f"object {part.label}: {what}")

    def _retried(self, part: _Part, offset: int, action: Callable[[], T]) -> T:
        """`action`, tried again after each BACKOFF delay: a network hiccup must not end a long job, and a
        retry reads the same range again."""
        for tried in itertools.count(1):
            try:
                return action()
            except Exception as exc:  # s3fs, botocore and aiohttp errors share no base class
                if tried > len(BACKOFF) or self._stopped.wait(BACKOFF[tried - 1]):
                    what = str(exc) if isinstance(exc, StorageError) else f"{type(exc).__name__}: {exc}"
                    raise self._error(part, f"{what} (at byte {offset}, {tried} tries)") from exc

    def _size(self, part: _Part) -> int:
        if part.error:
            raise part.error
        if part.size is None:
            try:
                info = self._retried(part, 0, lambda: part.fs.info(part.path))
            except StorageError as exc:
                part.error = exc
                raise
            part.size, part.identity = int(info.get("size") or 0), transfer.identity(info)
        return part.size

    def _ranges(self, parts: Iterator[_Part]) -> Iterator[tuple[_Part, int, int]]:
        """(part, start, end) of every chunk of every object, in stream order. It ends at an object whose size
        cannot be learned: the writer reports that when it gets there, after the objects before it."""
        step = min(FIRST_RANGE, self.chunk_size)
        for part in parts:
            if part.data is not None:
                continue
            try:
                size = self._size(part)
            except StorageError:
                return
            start = 0
            while start < size:
                end = min(start + step, size)
                yield part, start, end
                start, step = end, self.chunk_size

    def _fetch(self, part: _Part, start: int, end: int) -> bytes:
        return self._retried(part, start, lambda: transfer.read_listed(part.fs, part.path, part.size or 0,
                                                                       part.identity, start, end))

    def _result(self, future: Future) -> bytes:
        while True:
            try:
                return future.result(timeout=POLL)
            except TimeoutError:
                if self._stopped.is_set():
                    raise _Ended from None

    # --- writing --------------------------------------------------------------------------------------

    def _write_part(self, fd: int, part: _Part, ahead: _Ahead) -> None:
        if part.data is not None:
            pieces, length = iter([part.data]), len(part.data)
        else:
            length = self._size(part)
            pieces = ahead.chunks(part, self._result)
            if self.gzip:
                pieces, length = _gunzip(pieces, self.chunk_size), None
        try:
            if not self.recordio:
                for piece in pieces:
                    self._write(fd, piece)
            elif length is None:
                self._write_spooled(fd, part, pieces)
            else:
                self._write_record(fd, part, length, pieces)
        except zlib.error as exc:
            raise self._error(part, f"cannot be gunzipped ({exc}); store it gzipped or set compression None") from None

    def _write_record(self, fd: int, part: _Part, length: int, pieces: Iterator[bytes]) -> None:
        if length > RECORD_MAX:
            raise self._error(part, f"{length} bytes is more than a RecordIO record holds ({RECORD_MAX}); split "
                              "it into smaller objects or stream it without record_wrapping")
        self._write(fd, struct.pack("<II", RECORDIO_MAGIC, length))  # cflag 0 (upper 3 bits): a whole record
        for piece in pieces:
            self._write(fd, piece)
        self._write(fd, bytes(-length % 4))

    def _write_spooled(self, fd: int, part: _Part, pieces: Iterator[bytes]) -> None:
        """A gunzipped object as one record: its length, which the header gives first, is known only at its
        end, so it is spooled (in memory up to a chunk, then on disk)."""
        with tempfile.SpooledTemporaryFile(max_size=self.chunk_size) as spool:
            for piece in pieces:
                spool.write(piece)
                if spool.tell() > RECORD_MAX:
                    break
            length = spool.tell()
            spool.seek(0)
            self._write_record(fd, part, length, iter(lambda: spool.read(self.chunk_size), b""))


def _gunzip(pieces: Iterator[bytes], most: int) -> Iterator[bytes]:
    """The gunzipped bytes of a gzip stream (several members too, as gunzip reads them), at most `most` bytes
    at a time; zlib.error when it is not gzip or ends early."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    seen = False
    for data in pieces:
        seen = True
        while data:
            if inflater.eof:  # the next member
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = inflater.decompress(data, most)
            data = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
            if out:
                yield out
    if rest := inflater.flush():
        yield rest
    if seen and not inflater.eof:
        raise zlib.error("the gzip stream ends early")


def _check(channel: ChannelSource, host_index: int, host_count: int) -> None:
    if not 0 <= host_index < host_count:
        raise ValidationError("host_index", host_index, f"must be in 0..{host_count - 1} for {host_count} hosts")
    for field, value, valid in (("record_wrapping", channel.record_wrapping, WRAPPINGS),
                                ("compression", channel.compression, COMPRESSIONS),
                                ("s3_data_type", channel.s3_data_type, DATA_TYPES)):
        if value not in valid:
            raise ValidationError(f"channel {channel.name}: {field}", value,
                                  f"use one of {', '.join(map(str, valid))}")


def start(channel: ChannelSource, data_dir: Path, host_index: int, host_count: int,
          on_error: Callable[[str], None], *, chunk_size: int = CHUNK, ahead: int = AHEAD) -> PipeStreamer:
    """Start streaming `channel` into `data_dir`/<channel>_<epoch> in a daemon thread; stop() ends it."""
    streamer = PipeStreamer(channel, data_dir, host_index, host_count, on_error, chunk_size, ahead)
    streamer._thread.start()
    return streamer
