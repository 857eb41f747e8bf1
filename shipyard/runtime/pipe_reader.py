"""Reading a Pipe-mode channel in a training script: `read_records(path)`, a plain generator, and
`PipeDataset`, a torch IterableDataset whose every iteration reads the next epoch's pipe (torch is imported
only when PipeDataset is used).

Epochs are counted in `<state_dir>/.<channel>-pipe_mode-state` under a lock, the file sagemaker_tensorflow's
PipeModeDataset keeps, so a new dataset object, a DataLoader worker process (made anew every epoch) and a
PipeModeDataset all open the pipe after the last one opened. A pipe has one reader: read each channel from
one process per instance."""

from __future__ import annotations

import fcntl
import itertools
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from shipyard.errors import StorageError, ValidationError

RECORD_FORMATS = ("RecordIO", "TFRecord", "TextLine", "raw")
RECORDIO_MAGIC = 0xCED7230A
WAIT_SECONDS = 120.0       # how long a reader waits for a pipe to appear (SageMaker's readers: 120 s)
RAW_CHUNK = 1024 * 1024    # what one 'raw' record holds at most


def _ml_base() -> Path:
    """/opt/ml, or where the agent put the instance's tree when it runs without a sandbox."""
    input_dir = os.environ.get("SM_INPUT_DIR")
    return Path(input_dir).parent if input_dir else Path("/opt/ml")


def default_pipe_dir() -> Path:
    return _ml_base() / "input" / "data"


def default_config_dir() -> Path:
    return _ml_base() / "input" / "config"


def default_state_dir() -> Path:
    return _ml_base() / "pipe_state"


def next_epoch(channel: str, state_dir: str | Path | None = None) -> int:
    """The epoch the next reader of `channel` opens (0 first), counted up for the one after it."""
    state = Path(state_dir or default_state_dir())
    state.mkdir(parents=True, exist_ok=True)
    with open(state / f".{channel}-pipe_mode-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        counter = state / f".{channel}-pipe_mode-state"
        epoch = int(counter.read_text() or 0) if counter.exists() else 0
        counter.write_text(str(epoch + 1))
    return epoch


def open_pipe(path: str | Path, timeout: float = WAIT_SECONDS) -> BinaryIO:
    """`path` open for reading once it exists: the next epoch's pipe appears only after the previous one
    was read to its end (or closed), so a reader waits for it, as SageMaker's readers do."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout:g} s: is its channel in Pipe mode, and was "
                               "the previous epoch's pipe read to its end or closed?")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
    return open(path, "rb")


def read_records(path: str | Path, record_format: str = "RecordIO", timeout: float = WAIT_SECONDS) -> Iterator[bytes]:
    """The records of the pipe (or file) at `path`, waiting up to `timeout` for it to appear. Formats:
    'RecordIO' (MXNet's framing: a record split with cflag 1/2/3 is joined with the magic word between
    parts, as MXNet reads it), 'TFRecord' (length and data; the CRCs are not checked), 'TextLine' (lines
    without their newline) and 'raw' (the bytes as they come, up to RAW_CHUNK at a time). Closing the
    generator early closes the pipe, which ends that epoch for the writer."""
    if record_format not in RECORD_FORMATS:
        raise ValidationError("record_format", record_format, f"use one of {', '.join(RECORD_FORMATS)}")
    with open_pipe(path, timeout) as stream:
        if record_format == "RecordIO":
            yield from _recordio(stream, path)
        elif record_format == "TFRecord":
            yield from _tfrecord(stream, path)
        elif record_format == "TextLine":
            yield from (line.rstrip(b"\n") for line in stream)
        else:
            yield from iter(lambda: stream.read1(RAW_CHUNK), b"")


def _exactly(stream: BinaryIO, n: int, path, what: str) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise StorageError(f"{path}: the stream ends inside {what} ({len(data)} of {n} bytes)")
    return data


def _headers(stream: BinaryIO, n: int, path, what: str) -> Iterator[bytes]:
    """Each record's `n`-byte header, until the stream ends between records."""
    while header := stream.read(n):
        if len(header) != n:
            raise StorageError(f"{path}: the stream ends inside {what} ({len(header)} of {n} bytes)")
        yield header


def _recordio(stream: BinaryIO, path) -> Iterator[bytes]:
    record = bytearray()
    for header in _headers(stream, 8, path, "a RecordIO header"):
        magic, word = struct.unpack("<II", header)
        if magic != RECORDIO_MAGIC:
            raise StorageError(f"{path}: not RecordIO: a header starts with {magic:#010x}, not "
                               f"{RECORDIO_MAGIC:#010x}; read it with the record_format it was written in")
        flag, length = word >> 29, word & ((1 << 29) - 1)
        record += _exactly(stream, length, path, "a RecordIO record")
        _exactly(stream, -length % 4, path, "a RecordIO record's padding")
        if flag in (0, 3):  # a whole record, or a split one's last part
            yield bytes(record)
            record.clear()
        else:
            record += struct.pack("<I", RECORDIO_MAGIC)
    if record:
        raise StorageError(f"{path}: the stream ends inside a RecordIO record split in parts")


def _tfrecord(stream: BinaryIO, path) -> Iterator[bytes]:
    for header in _headers(stream, 12, path, "a TFRecord header"):  # length (uint64) and its CRC
        (length,) = struct.unpack("<Q", header[:8])
        yield _exactly(stream, length, path, "a TFRecord record")
        _exactly(stream, 4, path, "a TFRecord record's CRC")


def __getattr__(name: str):
    # PipeDataset subclasses torch's IterableDataset, so it is defined on first use: read_records works
    # where torch is not installed.
    if name != "PipeDataset":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    global PipeDataset
    PipeDataset = _define_pipe_dataset()
    return PipeDataset


def _define_pipe_dataset():
    from torch.utils.data import IterableDataset, get_worker_info

    class PipeDataset(IterableDataset):
        """The records of Pipe-mode channel `channel`; each iteration reads the next `epochs` epochs' pipes
        (None: every epoch the channel streams, endlessly). Use it with DataLoader(num_workers=0 or 1): a
        pipe has one reader."""

        def __init__(self, channel: str, record_format: str = "RecordIO", data_dir: str | Path | None = None,
                     epochs: int | None = 1, state_dir: str | Path | None = None,
                     timeout: float = WAIT_SECONDS) -> None:
            if record_format not in RECORD_FORMATS:
                raise ValidationError("record_format", record_format, f"use one of {', '.join(RECORD_FORMATS)}")
            self.channel, self.record_format, self.epochs, self.timeout = channel, record_format, epochs, timeout
            self.data_dir = Path(data_dir or default_pipe_dir())
            self.state_dir = Path(state_dir or default_state_dir())

        def __iter__(self) -> Iterator[bytes]:
            worker = get_worker_info()
            if worker is not None and worker.num_workers > 1:
                raise ValidationError("num_workers", worker.num_workers, f"a pipe has one reader: read channel "
                                      f"{self.channel} with DataLoader(num_workers=0 or 1)")
            for _ in range(self.epochs) if self.epochs is not None else itertools.count():
                epoch = next_epoch(self.channel, self.state_dir)
                path = self.data_dir / f"{self.channel}_{epoch}"
                yield from read_records(path, self.record_format, self.timeout)

    PipeDataset.__module__, PipeDataset.__qualname__ = __name__, "PipeDataset"  # so workers can unpickle it
    return PipeDataset
