"""Scenarios for tests/runtime/test_lazyfiles.py, each run in a process of its own (a mount namespace needs
a single-threaded process to make it): `python lazy_scenarios.py NAME DIR` prints one JSON line.

Each makes objects under DIR/source, serves them as lazy files at DIR/view (read-only over itself, watched)
from a local file system that counts, and can fail or shorten, its reads, and reads the view as a script
would: from this process's main thread, while the listener's threads answer the kernel."""

from __future__ import annotations

import errno
import json
import mmap
import os
import random
import sys
import time
from pathlib import Path

from fsspec.implementations.local import LocalFileSystem
from s3fs.utils import FileExpired

from shipyard.runtime import lazyfiles, namespace
from shipyard.storage.s3lite import ObjectChanged

CHUNK = 64 * 1024


class Source(LocalFileSystem):
    """The bucket: every ranged read recorded; the first `failures` raise as a 503 does, `short` ones lose a
    byte, every one raises `expired` (s3fs's or s3lite's error for a refused If-Match) when it is given."""

    def __init__(self, failures: float = 0, short: bool = False, expired: type | None = None) -> None:
        super().__init__(skip_instance_cache=True)
        self.reads: list[tuple[str, int]] = []
        self.failures, self.short, self.expired = failures, short, expired

    def _open(self, path, mode="rb", **kwargs):
        return _Reader(self, super()._open(path, mode, **kwargs), os.path.basename(path))

    def settled(self, name: str, quiet: float = 0.5) -> list[int]:
        """The chunks of `name` read so far, once none has been for `quiet` seconds (read-ahead starts
        when the read it follows has its bytes)."""
        seen = None
        while seen != (seen := len(self.reads)):
            time.sleep(quiet)
        return sorted({chunk for read, chunk in self.reads if read == name})


class _Reader:
    def __init__(self, source: Source, file, name: str) -> None:
        self.source, self.file, self.name, self.at = source, file, name, 0

    def seek(self, at: int) -> int:
        self.at = at
        return self.file.seek(at)

    def read(self, size: int) -> bytes:
        self.source.reads.append((self.name, self.at // CHUNK))
        if self.source.failures > 0:
            self.source.failures -= 1
            raise OSError(errno.EBUSY, "Service Unavailable")   # what s3fs makes of a 503
        if self.source.expired:
            raise self.source.expired(self.name, '"0123"')
        data = self.file.read(size)
        return data[:-1] if self.source.short else data

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


def serve(root: Path, source: Source, objects: dict[str, bytes], cache_bytes: int = 1 << 40):
    (root / "source").mkdir(parents=True)
    for key, body in objects.items():
        (root / "source" / key).parent.mkdir(parents=True, exist_ok=True)
        (root / "source" / key).write_bytes(body)
    view = root / "view"
    view.mkdir()
    namespace.private_mounts()
    group, beneath, scratch = lazyfiles.make_view(view, root / "scratch")
    errors: list[str] = []
    listed = {key: (len(body), "") for key, body in sorted(objects.items())}
    channel = lazyfiles.LazyChannel(group, "train", beneath, scratch, source, str(root / "source"), [listed],
                                    cache_bytes=cache_bytes, on_error=errors.append)
    asked = []
    answer = channel._answer
    channel._answer = lambda fd, span: (asked.append(span), answer(fd, span))[1]
    return view, channel, errors, asked


def body(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def lazily(root: Path) -> dict:
    big = body(10 * CHUNK + 123, 1)
    objects = {"big.bin": big, "empty": b"", "nested/deep/x.txt": b"deep\n",
               **{f"small-{i}.bin": body(1000 + i, 10 + i) for i in range(12)}}
    source = Source()
    view, channel, errors, asked = serve(root, source, objects)
    out = {"listing": sorted(str(p.relative_to(view)) for p in view.rglob("*") if p.is_file())}
    with open(view / "big.bin", "rb") as f:
        f.seek(3 * CHUNK + 10)
        out["partial_ok"] = f.read(4096) == big[3 * CHUNK + 10:3 * CHUNK + 10 + 4096]
    out["after_partial"] = source.settled("big.bin")
    out["big_blocks"], out["big_size"] = (view / "big.bin").stat().st_blocks * 512, len(big)
    out["first_epoch_ok"] = all((view / key).read_bytes() == data for key, data in objects.items())
    with open(view / "small-11.bin", "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mapped:
        out["mmap_ok"] = mapped[:] == objects["small-11.bin"]
    out["reads_per_chunk"] = max(source.reads.count(read) for read in set(source.reads))
    before = len(asked)
    out["second_epoch_ok"] = all((view / key).read_bytes() == data for key, data in objects.items())
    out["asked_in_second_epoch"] = len(asked) - before
    try:
        with open(view / "big.bin", "r+b") as f:
            f.write(b"x")
        out["write"] = "written"
    except OSError as exc:
        out["write"] = exc.strerror
    channel.stop()
    return out | {"errors": errors}


def dark(root: Path, failures: float) -> dict:
    data = body(3 * CHUNK, 2)
    source = Source(failures=failures)
    lazyfiles.RETRY_SECONDS = 3.0
    view, channel, errors, _ = serve(root, source, {"blob.bin": data})
    try:
        out = {"ok": (view / "blob.bin").read_bytes() == data}
    except OSError as exc:
        out = {"errno": errno.errorcode[exc.errno]}
    channel.stop()
    return out | {"errors": errors, "tries": len(source.reads)}


def read_error(path: Path) -> dict:
    try:
        path.read_bytes()
        return {"read": "no error"}
    except OSError as exc:
        return {"errno": errno.errorcode[exc.errno]}


def changed(root: Path) -> dict:
    source = Source(short=True)
    lazyfiles.RETRY_SECONDS = 1.0
    view, channel, errors, _ = serve(root, source, {"blob.bin": body(CHUNK // 2, 3)})
    out = read_error(view / "blob.bin")
    channel.stop()
    return out | {"errors": errors}


def gone(root: Path, how: str) -> dict:
    source = Source(expired={"changed": FileExpired, "changed-s3lite": ObjectChanged}.get(how))
    view, channel, errors, _ = serve(root, source, {"blob.bin": body(CHUNK, 4)})
    if how == "deleted":
        (root / "source" / "blob.bin").unlink()
    started = time.monotonic()
    out = read_error(view / "blob.bin")
    channel.stop()
    return out | {"errors": errors, "seconds": time.monotonic() - started}


def bounded(root: Path) -> dict:
    objects = {f"part-{i}.bin": body(2 * CHUNK, 20 + i) for i in range(5)}
    source = Source()
    view, channel, errors, _ = serve(root, source, objects, cache_bytes=5 * CHUNK)   # two objects and a half
    first = (view / "part-0.bin").read_bytes() == objects["part-0.bin"]
    with open(view / "part-0.bin", "rb") as held:   # open while the others push it out of the cache
        first &= all((view / key).read_bytes() == data for key, data in objects.items())
        blocks = {key: (view / key).stat().st_blocks for key in objects}
        held_ok = held.read() == objects["part-0.bin"]
    reads = len(source.reads)
    again = (view / "part-0.bin").read_bytes() == objects["part-0.bin"]
    channel.stop()
    return {"first_ok": first, "emptied": sorted(k for k, b in blocks.items() if b == 0), "held_ok": held_ok,
            "again_ok": again, "fetched_again": len(source.reads) - reads,
            "scratch": os.listdir(root / "scratch"), "errors": errors}


SCENARIOS = {"lazily": lazily, "dark_then_back": lambda root: dark(root, 3),
             "dark": lambda root: dark(root, float("inf")), "changed": changed,
             "deleted": lambda root: gone(root, "deleted"), "replaced": lambda root: gone(root, "changed"),
             "replaced-s3lite": lambda root: gone(root, "changed-s3lite"),
             "bounded": bounded}

if __name__ == "__main__":
    lazyfiles.CHUNK = CHUNK
    print(json.dumps(SCENARIOS[sys.argv[1]](Path(sys.argv[2]))), flush=True)
