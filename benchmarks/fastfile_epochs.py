"""FastFile's later epochs against local files, without a job around them: the same objects read whole, epoch
after epoch, as local files (File mode's copy), as lazy files (runtime/lazyfiles.py) and through rclone's
mount (runtime/fastfile.py's flags), in one process, one after the other, on the same disk.

    sudo .venv/bin/python benchmarks/fastfile_epochs.py [--size-mb 1024] [--epochs 5] [--json out.json]

Needs root (a mount namespace of its own, a fanotify group) and Linux 6.14+ on a disk with pre-content
events (ext4, xfs, btrfs). Two datasets of --size-mb MiB each, random bytes in a local source directory:
`many` (1 MiB objects) and `few` (--size-mb / 20 MiB objects). Each way of reading first fetches everything
(File: storage/transfer.download into a directory; lazy files and rclone: a first epoch through the view),
then reads every file whole in 1 MiB reads, in key order, --epochs times; the table gives the first epoch,
the median of the later ones and their ratio to local files'. A last, untimed epoch checks every byte
against the source's digest (hashing in the timed ones would cost more than the reads themselves).
input_modes.py measures the same inside real jobs on S3, where one epoch's time moves by 30% between runs
on this machine; here the medians of several epochs in one process compare the read paths alone. The goal (issue 17): a later FastFile epoch at most 1.2x local files'."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

MIB = 1024 * 1024
GOAL = 1.20


def make_source(root: Path, total: int, size: int) -> str:
    """Objects of `size` bytes (the last one shorter) under root; the digest of their bytes in key order."""
    root.mkdir(parents=True)
    digest = hashlib.sha256()
    for i, start in enumerate(range(0, total, size)):
        data = os.urandom(min(size, total - start))
        (root / f"part-{i:05d}.bin").write_bytes(data)
        digest.update(data)
    return digest.hexdigest()


def epoch(root: Path, names: list[str], digest=None) -> float:
    """Every file read whole in 1 MiB reads, in key order; its seconds. With `digest` (hashlib), the bytes go
    into it (an epoch that checks, not timed: hashing costs more than reading from the page cache)."""
    buffer = bytearray(MIB)
    view = memoryview(buffer)
    started = time.perf_counter()
    for name in names:
        fd = os.open(root / name, os.O_RDONLY)
        try:
            while count := os.readv(fd, [view]):
                if digest is not None:
                    digest.update(view[:count])
        finally:
            os.close(fd)
    return time.perf_counter() - started


def epochs(root: Path, names: list[str], count: int, expected: str, what: str) -> list[float]:
    """`count` timed epochs, then one that checks every byte against the source's."""
    times = [epoch(root, names) for _ in range(count)]
    digest = hashlib.sha256()
    epoch(root, names, digest)
    if digest.hexdigest() != expected:
        raise RuntimeError(f"{what}: its files do not hold the source's bytes")
    return times


def local_files(source: Path, work: Path, names, count, expected) -> list[float]:
    from shipyard.storage import transfer

    started = time.perf_counter()
    transfer.download(str(source), work / "local")
    return [time.perf_counter() - started, *epochs(work / "local", names, count, expected, "local files")]


def lazy_files(source: Path, work: Path, names, count, expected) -> list[float]:
    from shipyard.runtime import lazyfiles
    from shipyard.storage import transfer

    view = work / "lazy"
    view.mkdir()
    group, beneath, scratch = lazyfiles.make_view(view, work / "scratch")
    fs, root, _, objects = transfer.listing(str(source))
    channel = lazyfiles.LazyChannel(group, "bench", beneath, scratch, fs, root, [objects], cache_bytes=1 << 50,
                                    on_error=print)
    try:
        return epochs(view, names, 1 + count, expected, "lazy files")
    finally:
        channel.stop()
        lazyfiles.unmake_view(view, group, beneath, scratch)


def rclone(source: Path, work: Path, names, count, expected) -> list[float]:
    from shipyard.runtime import fastfile
    from shipyard.runtime.config import ChannelSource

    view = work / "rclone"
    channel = ChannelSource(name="bench", uri=str(source))
    mount = fastfile.Mount(fastfile.plan(channel, view, work / "rclone-cache"), sys.stderr.fileno())
    try:
        return epochs(view, names, 1 + count, expected, "rclone")
    finally:
        mount.stop()


WAYS = {"local files": local_files, "lazy files": lazy_files, "rclone": rclone}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="each dataset's size in MiB (default 1024)")
    parser.add_argument("--epochs", type=int, default=5, help="epochs after the first (default 5)")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args()
    from shipyard.runtime import lazyfiles, namespace

    work = Path(tempfile.mkdtemp(prefix="shipyard-fastfile-epochs-", dir="/var/tmp"))
    problem = lazyfiles.problem(work)
    if problem:
        sys.exit(f"lazy files cannot serve in {work}: {problem}")
    namespace.private_mounts()   # before any thread: the views and the mount go with this process
    total = args.size_mb * MIB
    results: dict[str, dict] = {}
    try:
        for dataset, size in (("many", MIB), ("few", total // 20)):
            source = work / dataset / "source"
            expected = make_source(source, total, size)
            names = sorted(p.name for p in source.iterdir())
            results[dataset] = {}
            for way, run in WAYS.items():
                place = work / dataset / way.replace(" ", "-")
                place.mkdir()
                subprocess.run(["sync"], check=True)
                times = run(source, place, names, args.epochs, expected)
                results[dataset][way] = {"first_s": times[0], "later_s": times[1:],
                                         "median_s": statistics.median(times[1:])}
                print(f"{dataset} {way:12} first {times[0]:.2f}s, later " + " ".join(f"{t:.3f}" for t in times[1:]),
                      flush=True)
                shutil.rmtree(place, ignore_errors=True)
            shutil.rmtree(work / dataset, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    header = ["dataset", *(f"{w} first (s)" for w in WAYS), *(f"{w} later, median (s)" for w in WAYS),
              "lazy / local", "rclone / local"]
    rows = []
    for dataset, found in results.items():
        local = found["local files"]["median_s"]
        rows.append([f"{dataset} ({args.size_mb} MiB)", *(f"{found[w]['first_s']:.2f}" for w in WAYS),
                     *(f"{found[w]['median_s']:.3f}" for w in WAYS),
                     f"{found['lazy files']['median_s'] / local:.2f}x", f"{found['rclone']['median_s'] / local:.2f}x"])
    print("\n| " + " | ".join(header) + " |\n|---|" + "---:|" * (len(header) - 1))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    for dataset, found in results.items():
        ratio = found["lazy files"]["median_s"] / found["local files"]["median_s"]
        print(f"goal, {dataset}: a later FastFile epoch (lazy files) <= {GOAL}x local files: {ratio:.2f}x, "
              f"{'met' if ratio <= GOAL else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps({"setup": vars(args) | {"json": str(args.json)}, "results": results},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
