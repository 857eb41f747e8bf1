"""File, FastFile and Pipe input modes side by side, as real shipyard jobs on a real S3 endpoint: time to the
script's first batch and to the end of its first epoch; File mode's download against `aws s3 sync`.

    .venv/bin/python benchmarks/input_modes.py [--size-mb 2048] [--modes ...] [--json out.json] [--keep]

moto's S3 server on 127.0.0.1 (benchmarks/fastfile_mounts.py's `Moto`: a subprocess, objects in memory, each
object's bytes read out of moto's buffer once, requests and the object bytes sent counted) holds one dataset
at a time, each in a fresh server: `many` (2,000 objects) and `few` (20 objects) under s3://bench/<dataset>/,
each --size-mb MiB in all (one os.urandom buffer, cut into equal consecutive objects named in order, so both
datasets are the same bytes and the channel's sorted contents are the buffer). After the upload one ranged
GET of a byte per object fills the server's per-object cache, so that no mode pays for it.

For each dataset, one 1-instance job per mode (instance_type="local", a bubblewrap sandbox, SHIPYARD_HOME a
temporary directory) with the dataset as channel `train` in that mode, started cold; then each mode again on
a warm pool (keep_alive_period_in_seconds: an unmeasured job without a channel makes it, every warm job must
reuse it), which takes the start common to every mode (controller, sandbox, Python) out of the first batch. Its script notes time.time() as its
first statement, lists the channel's files (os.walk, sorted) or waits for the pipe /opt/ml/input/data/train_0,
and reads everything sequentially in 1 MiB reads (a pipe read until 1 MiB or its end): the first batch is the
first 1 MiB it has (its sha256 is checked against the buffer's), the epoch ends at the last byte (every byte
counted). FastFile reads a second and a third epoch (from what its first fetched), and File mode does too, as
the baseline of reading local files (just written: from the page cache, as FastFile's files are). FastFile
runs as shipyard serves it here (lazy files where the kernel and the rights allow them, runtime/fastfile.py),
and once more, cold, served by rclone's mount (SHIPYARD_FASTFILE=rclone), side by side. Measured on this machine's
clock, from just before fit():
  first batch      submit until the script has its first 1 MiB (File mode: after the whole download)
  epoch 1          submit until the script has read the last byte of its first epoch
  epoch 2          the faster of the second and third epochs' own times (File: local files; FastFile: what
                   its first epoch fetched), each read whole: one epoch's time moves by 30% between
                   runs here, for File mode's local files too
  wall             submit until fit() returns
  floor            submit until the first statement of a script without a channel (prime.py), cold and on
                   the warm pool: the start every mode pays; where it is over 5% of File mode's first batch,
                   no input mode can meet that goal, and the goals table says so
and from the endpoint: the object bytes and requests S3 served during the job; from the instance's directory:
the local disk the job used (du). File mode's download is the agent's own measure
(`channel train: N objects, B bytes fetched from ... in X.XXs` in the job's host log), compared with
`aws s3 sync s3://bench/<dataset>/ DIR --endpoint-url ...` (Debian's awscli: `SHIPYARD_BENCH=1 make setup`)
timed here on the same endpoint with the same credentials, into a fresh directory, right after each cold
File mode job (run at the end of a dataset instead, it was 1.2-1.5x faster than between the jobs: compare
like with like). Goals (issue): FastFile and
Pipe first batch <= 5% of File mode's (cold against cold, warm against warm); File mode's download >= 1.0x aws
s3 sync's throughput; a second FastFile epoch at most 20% slower than reading local files (File mode's second
epoch, cold runs).

Steps run one after the other, `os.sync()` between them (no writeback left from the last one). What a goal
compares is the median of REPEATS runs (File, FastFile and Pipe jobs, the floor, aws s3 sync; a repeated job's
script ends at its first batch); the rest is one run. Instance directories are removed only once a dataset is
done (clear() says why). moto is Python on the same 2 cores as the agent, rclone, awscli and the script: throughputs are relative to
this endpoint, not what S3 would give; single runs vary by 10-20% on a 2-CPU machine."""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import hashlib
import io
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from fastfile_mounts import MIB, REGION, Moto  # noqa: E402
from run import workspace  # noqa: E402

BUCKET, CHANNEL = "bench", "train"
DATASETS = {"many": 2000, "few": 20}          # objects per dataset
# "FastFile rclone": FastFile served by rclone's mount (SHIPYARD_FASTFILE=rclone), where "FastFile" is what
# shipyard picks on this machine (lazy files where the kernel and the rights allow them); cold only.
MODES = ("File", "FastFile", "FastFile rclone", "Pipe")
RUNS = [(mode, warm) for warm in (False, True) for mode in MODES
        if not (warm and mode == "FastFile rclone")]   # cold, then on a warm pool
KEEP_ALIVE = 600
EPOCHS = {"File": 3, "FastFile": 3, "Pipe": 1}
DEBIAN_AWS = "/usr/bin/aws"                   # Debian's awscli, what SHIPYARD_BENCH=1 make setup installs
AWS_HINT = "SHIPYARD_BENCH=1 make setup  (installs Debian's awscli: apt-get install -y awscli)"
GOAL_FIRST_BATCH, GOAL_SYNC_RATIO, GOAL_SECOND_EPOCH = 0.05, 1.0, 1.20
# Runs of what a first-batch or download goal compares, the median taken: one job's start moves by tens of
# percent on this 2-CPU machine. The repeats end at their first batch (File mode's still download it all).
REPEATS = 3
REPEATED = ("File", "FastFile", "Pipe")

# The job's script: the channel read in 1 MiB reads, as a loader would, every mark on this machine's clock.
SCRIPT = '''\
import time; START = time.time()
import argparse, hashlib, json, os

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--channel", default="train")
parser.add_argument("--first-only", type=int, default=0)   # a repeat: the first batch is all it measures
args, _ = parser.parse_known_args()
MIB = 1024 * 1024
DATA = "/opt/ml/input/data"
mode = json.loads(os.environ["SM_INPUT_DATA_CONFIG"])[args.channel]["TrainingInputMode"]
buffer = bytearray(MIB)
view = memoryview(buffer)
marks = {"mode": mode, "start": START, "epochs": []}


def fill(f):
    """Up to 1 MiB into the buffer: fewer bytes only at the end (a pipe hands out what it holds)."""
    n = 0
    while n < MIB:
        got = f.readinto(view[n:])
        if not got:
            break
        n += got
    return n


def sources(epoch):
    """The epoch's streams in order: the channel's files sorted by path, or the epoch's pipe."""
    if mode == "Pipe":
        path = f"{DATA}/{args.channel}_{epoch}"
        while not os.path.exists(path):
            time.sleep(0.005)
        yield open(path, "rb", buffering=0)
        return
    root = f"{DATA}/{args.channel}"
    paths = sorted(os.path.join(folder, name) for folder, _, names in os.walk(root) for name in names)
    for path in paths:
        yield open(path, "rb", buffering=0)


for epoch in range(args.epochs):
    began, total, files, head = time.time(), 0, 0, bytearray()
    for f in sources(epoch):
        files += 1
        with f:
            while True:
                n = fill(f)
                if not n:
                    break
                total += n
                if epoch == 0 and "first_batch" not in marks:
                    head += view[:min(n, MIB - len(head))]
                    if len(head) == MIB:
                        marks["first_batch"] = time.time()
                        marks["first_sha256"] = hashlib.sha256(head).hexdigest()
                        if args.first_only:
                            print("BENCH_INPUT " + json.dumps(marks), flush=True)
                            raise SystemExit(0)
    if epoch == 0 and "first_batch" not in marks:   # less than 1 MiB in all
        marks["first_batch"] = time.time()
        marks["first_sha256"] = hashlib.sha256(head).hexdigest()
    marks["epochs"].append({"began": began, "end": time.time(), "bytes": total, "files": files})
print("BENCH_INPUT " + json.dumps(marks), flush=True)
'''

MOUNTED = re.compile(rf"channel {CHANNEL}: mounted \(FastFile, ([^)]+)\)")
FETCHED = re.compile(rf"channel {CHANNEL}: (\d+) objects, (\d+) bytes fetched from \S+ \(\w+\) in ([0-9.]+)s")


def column(mode: str, warm: bool) -> str:
    return f"{mode} warm" if warm else mode


# -- data --------------------------------------------------------------------------------------------
def layout(total: int, count: int) -> list[tuple[str, int, int]]:
    """(key, offset, size) of `count` consecutive, near-equal pieces of a `total`-byte buffer."""
    size, extra = divmod(total, count)
    pieces, offset = [], 0
    for i in range(count):
        length = size + (1 if i < extra else 0)
        pieces.append((f"part-{i:05d}.bin", offset, length))
        offset += length
    return pieces


def upload(endpoint: str, dataset: str, data: bytes, pieces: list[tuple[str, int, int]]) -> None:
    """Every piece to s3://bench/<dataset>/<key>, then one ranged GET of a byte per object: moto reads an
    object out of its buffer on its first GET (benchmarks/fastfile_mounts.py), not in any measured step."""
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION, config=Config(max_pool_connections=8))
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=BUCKET)
    workers = 8 if len(pieces) > 100 else 4        # 4 x ~100 MB bodies in flight at most
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda p: client.put_object(Bucket=BUCKET, Key=f"{dataset}/{p[0]}",
                                                  Body=data[p[1]:p[1] + p[2]]), pieces))
        list(pool.map(lambda p: client.get_object(Bucket=BUCKET, Key=f"{dataset}/{p[0]}",
                                                  Range="bytes=0-0")["Body"].read(), pieces))


def disk_use(path: Path) -> int:
    """Bytes allocated under `path` (du)."""
    used = 0
    for folder, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                used += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return used


def clear(workdir: Path) -> None:
    """Every job's instance directories and every aws s3 sync copy, removed once a dataset is done, not after
    each step: this machine's ext4 has no journal, and without one a new inode skips each one freed in the
    last 60 s in its group (ext4's recently_deleted(), for NFS), so 2,000 files made just after 2,000 were
    removed took 0.7 ms each instead of 0.02 (1.5 s more before a FastFile job's script could start)."""
    for instances in (workdir / "home" / "jobs").glob("*/instances"):
        shutil.rmtree(instances, ignore_errors=True)
    for copy in workdir.glob("aws-sync-*"):
        shutil.rmtree(copy, ignore_errors=True)
    settle()


def settle() -> None:
    """Dirty pages written out, so that no step pays for the writeback of the one before it."""
    os.sync()


def rss_mib(pid: int) -> float:
    import psutil

    return psutil.Process(pid).memory_info().rss / MIB


# -- runs --------------------------------------------------------------------------------------------
def estimator(source: Path, entry_point: str, name: str, warm: bool, **kwargs):
    from shipyard import Estimator

    return Estimator(entry_point=entry_point, source_dir=str(source), instance_type="local", base_job_name=name,
                     keep_alive_period_in_seconds=KEEP_ALIVE if warm else None, **kwargs)


def make_pool(source: Path, dataset: str) -> str:
    """An unmeasured job (prime.py: no channel) whose instance stays warm for the warm runs; its name (what
    releases the pool until a later job reuses it)."""
    return start_floor(source, dataset, True, pool=False)[0]


def reused(name: str, warm: bool) -> None:
    """A job meant to run on the warm pool did (else its times would be a cold job's)."""
    from shipyard.store import Store

    if warm and not any("reusing warm pool" in e["message"] for e in Store().events(name)):
        raise RuntimeError(f"job {name} did not reuse the warm pool")


def repeated(runs: list[dict]) -> dict:
    """The first run's measures with the medians of every run's start, first batch and download."""
    out = dict(runs[0])
    for key in ("script_start_s", "first_batch_s", "download_s"):
        if key in out:
            out[key + "_runs"] = [run[key] for run in runs]
            out[key] = statistics.median(out[key + "_runs"])
    if "download_s" in out:
        out["download_mbps"] = out["download_bytes"] / out["download_s"] / 1e6
    return out


def start_floor(source: Path, dataset: str, warm: bool, pool: bool = True) -> tuple[str, float]:
    """(name, seconds from submission to its script's first statement) of a job without a channel (prime.py),
    cold or on the dataset's warm pool (`pool=False`: the job that makes it): the start every mode pays
    before any byte of data."""
    from shipyard.store import Store

    kind = "pool" if not pool else "warm-floor" if warm else "cold-floor"
    job = estimator(source, "prime.py", f"inputs-{dataset}-{kind}", warm)
    t0 = time.time()
    with contextlib.redirect_stdout(io.StringIO()):
        job.fit(wait=True, logs="None")
    name = job.latest_training_job.name
    reused(name, warm and pool)
    found = re.search(r"^BENCH_START (\S+)$", Store().log_path(name, "algo-1").read_text(), re.M)
    if found is None:
        raise RuntimeError(f"{name}: prime.py printed no BENCH_START")
    return name, float(found[1]) - t0


def run_job(source: Path, dataset: str, mode: str, moto: Moto, expected: dict, warm: bool = False,
            first_only: bool = False) -> dict:
    """One 1-instance job reading s3://bench/<dataset>/ as channel train in `mode` (`warm`: on the warm pool
    make_pool made, which it must reuse); its marks relative to submission (fit()), the endpoint's counts,
    the disk it used. `first_only`: a repeat, whose script ends at its first batch (its start, first batch
    and File mode's download only). The instance's directory stays until clear() (see there)."""
    from shipyard.inputs import TrainingInput
    from shipyard.store import Store

    input_mode, *served_by = mode.split()
    estimator_ = estimator(source, "bench_input.py", f"inputs-{dataset}-{mode.lower().replace(' ', '-')}", warm,
                           hyperparameters={"epochs": 1 if first_only else EPOCHS[input_mode], "channel": CHANNEL,
                                            "first-only": int(first_only)})
    channel = TrainingInput(f"s3://{BUCKET}/{dataset}/", input_mode=input_mode)
    captured = io.StringIO()
    s0 = moto.stats()
    t0 = time.time()
    try:
        if served_by:
            os.environ["SHIPYARD_FASTFILE"] = served_by[0]
        with contextlib.redirect_stdout(captured):
            estimator_.fit({CHANNEL: channel}, wait=True, logs="None")
    except Exception:
        print(captured.getvalue(), file=sys.stderr)
        raise
    finally:
        os.environ.pop("SHIPYARD_FASTFILE", None)
    t_end = time.time()
    s1 = moto.stats()
    job = estimator_.latest_training_job
    store = Store()
    log = store.log_path(job.name, "algo-1").read_text(errors="replace")
    status = job.describe()["TrainingJobStatus"]
    found = [line for line in log.splitlines() if line.startswith("BENCH_INPUT ")]
    if status != "Completed" or not found:
        raise RuntimeError(f"{dataset} {mode}: job {job.name} {status}; its log ends:\n{log[-3000:]}")
    reused(job.name, warm)
    marks = json.loads(found[-1].removeprefix("BENCH_INPUT "))
    if marks["first_sha256"] != expected["first_sha256"]:
        raise RuntimeError(f"{dataset} {mode}: the first batch is not the channel's first MiB")
    fetched = FETCHED.search(log)
    if mode == "File" and not fetched:
        raise RuntimeError(f"{dataset} File: no 'channel {CHANNEL}: ... fetched' line in {job.name}'s log")
    download = {} if not fetched else {"download_objects": int(fetched[1]), "download_bytes": int(fetched[2]),
                                       "download_s": float(fetched[3])}
    if first_only:
        settle()
        return {"job": job.name, "script_start_s": marks["start"] - t0, "first_batch_s": marks["first_batch"] - t0,
                **download}
    epochs = marks["epochs"]
    for number, epoch in enumerate(epochs, 1):
        if (epoch["bytes"], epoch["files"]) != (expected["bytes"], expected["files"][input_mode]):
            raise RuntimeError(f"{dataset} {mode}: epoch {number} read {epoch['bytes']} bytes in {epoch['files']} "
                               f"files, expected {expected['bytes']} in {expected['files'][input_mode]}")
    mounted = MOUNTED.search(log)
    out = {
        "job": job.name,
        "served_by": mounted[1] if mounted else None,
        "wall_s": t_end - t0,
        "script_start_s": marks["start"] - t0,
        "first_batch_s": marks["first_batch"] - t0,
        "epoch1_s": epochs[0]["end"] - t0,
        "epoch1_read_mbps": epochs[0]["bytes"] / (epochs[0]["end"] - epochs[0]["began"]) / 1e6,
        "s3_object_mib": (s1["object_bytes"] - s0["object_bytes"]) / MIB,
        "s3_requests": s1["requests"] - s0["requests"],
        "s3_heads": s1["head"] - s0["head"],
        "s3_lists": s1["list"] - s0["list"],
        "disk_mib": disk_use(store.job_dir(job.name)) / MIB,
    }
    if len(epochs) > 1:
        out["epoch2_s"] = min(epoch["end"] - epoch["began"] for epoch in epochs[1:])
        out["epoch2_mbps"] = epochs[1]["bytes"] / out["epoch2_s"] / 1e6
    out.update(download)
    settle()
    return out


def run_aws_sync(aws: str, moto: Moto, dataset: str, workdir: Path, expected: dict) -> dict:
    """`aws s3 sync` of the dataset into a fresh directory, timed here; the directory stays until clear()."""
    dest = Path(tempfile.mkdtemp(prefix=f"aws-sync-{dataset}-", dir=workdir))
    argv = [aws, "s3", "sync", f"s3://{BUCKET}/{dataset}/", str(dest), "--endpoint-url", moto.endpoint,
            "--no-progress", "--only-show-errors"]
    s0 = moto.stats()
    t0 = time.perf_counter()
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - t0
    s1 = moto.stats()
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}: {done.stderr[-2000:]}")
    files = sorted(p for p in dest.rglob("*") if p.is_file())
    size = sum(p.stat().st_size for p in files)
    if (len(files), size) != (expected["files"]["File"], expected["bytes"]):
        raise RuntimeError(f"aws s3 sync wrote {len(files)} files of {size} bytes, expected "
                           f"{expected['files']['File']} of {expected['bytes']}")
    settle()
    return {"command": " ".join(argv[:5] + ["DIR", "--endpoint-url", "http://127.0.0.1:PORT", *argv[7:]]),
            "sync_s": seconds, "sync_bytes": size, "sync_mbps": size / seconds / 1e6,
            "s3_requests": s1["requests"] - s0["requests"], "s3_heads": s1["head"] - s0["head"],
            "s3_lists": s1["list"] - s0["list"]}


def find_aws(given: str | None) -> str | None:
    """The awscli to compare with: --aws, else Debian's (/usr/bin/aws), else the first `aws` on PATH."""
    if given:
        return shutil.which(given)
    return DEBIAN_AWS if os.access(DEBIAN_AWS, os.X_OK) else shutil.which("aws")


# -- report ------------------------------------------------------------------------------------------
ROWS = [
    ("served_by", "FastFile served by", "{}"),
    ("script_start_s", "submit -> script's first statement (s)", "{:.2f}"),
    ("first_batch_s", "submit -> first batch, 1 MiB (s)", "{:.2f}"),
    ("first_batch_s_runs", "  each run (s), the median above", "{:.2f}"),
    ("epoch1_s", "submit -> end of epoch 1 (s)", "{:.2f}"),
    ("epoch1_read_mbps", "  epoch 1, the script's reads (MB/s)", "{:.0f}"),
    ("epoch2_s", "epoch 2 or 3, the faster (s): File local, FastFile fetched", "{:.2f}"),
    ("epoch2_mbps", "  that epoch (MB/s)", "{:.0f}"),
    ("wall_s", "job wall, submit -> fit() returns (s)", "{:.2f}"),
    ("download_s", "File mode download, agent's log (s)", "{:.2f}"),
    ("download_s_runs", "  each run (s), the median above", "{:.2f}"),
    ("download_mbps", "  download throughput (MB/s)", "{:.0f}"),
    ("s3_object_mib", "object bytes S3 sent during the job (MiB)", "{:.0f}"),
    ("s3_requests", "S3 requests during the job", "{:.0f}"),
    ("s3_heads", "  of them HEAD", "{:.0f}"),
    ("s3_lists", "  of them LIST", "{:.0f}"),
    ("disk_mib", "local disk the job used, du (MiB)", "{:.0f}"),
]


def table(results: dict, datasets: list[str], warm: bool) -> tuple[str, str]:
    """(plain, markdown): rows the measures, columns each dataset's modes, cold or on a warm pool."""
    columns = [(d, column(m, warm)) for d in datasets for m in MODES if (m, warm) in RUNS]
    names = [f"{d} {m}" for d, m in columns]
    width = max(len(label) for _, label, _ in ROWS)
    plain = [f"{'':{width}} " + " ".join(f"{n:>13}" for n in names)]
    md = ["| measure | " + " | ".join(names) + " |", "|---|" + "---:|" * len(columns)]
    for key, label, fmt in ROWS:
        cells = []
        for d, m in columns:
            r = results[d].get(m)
            if r is None or "error" in r:
                cells.append("not run" if r is None else "failed")
            else:
                value = r.get(key)
                cells.append("-" if value is None else "/".join(fmt.format(v) for v in value)
                             if isinstance(value, list) else fmt.format(value))
        plain.append(f"{label:{width}} " + " ".join(f"{c:>13}" for c in cells))
        md.append(f"| {label.strip()} | " + " | ".join(cells) + " |")
    return "\n".join(plain), "\n".join(md)


def sync_table(results: dict, datasets: list[str]) -> tuple[str, str]:
    """(plain, markdown): File mode's download (the agent's time; the whole job's S3 requests) against aws s3
    sync's, per dataset."""
    plain = [f"{'File mode vs aws s3 sync':28} {'shipyard File mode':>36} {'aws s3 sync':>36} {'ratio':>7}"]
    md = ["| dataset | shipyard File mode download | aws s3 sync | shipyard / aws |", "|---|---:|---:|---:|"]
    for d in datasets:
        file, sync = results[d].get("File") or {}, results[d].get("aws") or {}
        if "download_mbps" not in file or "sync_mbps" not in sync:
            plain.append(f"{d:28} {'failed':>18}")
            md.append(f"| {d} | failed | failed | - |")
            continue
        ours, theirs = (f"{r[k + '_s']:.2f} s, {r[k + '_mbps']:.0f} MB/s, {r['s3_requests']:,} requests "
                        f"({r['s3_heads']:,} HEAD)" for r, k in ((file, "download"), (sync, "sync")))
        ratio = file["download_mbps"] / sync["sync_mbps"]
        plain.append(f"{d + f' ({DATASETS[d]:,} objects)':28} {ours:>36} {theirs:>36} {ratio:6.2f}x")
        md.append(f"| {d} ({DATASETS[d]:,} objects) | {ours} | {theirs} | {ratio:.2f}x |")
    return "\n".join(plain), "\n".join(md)


def goals(results: dict, datasets: list[str]) -> list[dict]:
    """Each goal per dataset: the measured ratio, the bound, met or not (None: not measured)."""
    out = []
    for d in datasets:
        r = results[d]
        file = r.get("File") or {}

        def ratio(a: float | None, b: float | None) -> float | None:
            return a / b if a is not None and b else None

        for warm in (False, True):
            baseline = (r.get(column("File", warm)) or {}).get("first_batch_s")
            runs = (r.get("floor") or {}).get("warm_s_runs" if warm else "cold_s_runs")
            floor = statistics.median(runs) if runs else None
            for mode in ("FastFile", "Pipe"):
                first = (r.get(column(mode, warm)) or {}).get("first_batch_s")
                out.append({"dataset": d, "goal": f"{mode} first batch <= 5% of File's, {'warm' if warm else 'cold'}",
                            "ratio": ratio(first, baseline), "bound": GOAL_FIRST_BATCH, "at_most": True,
                            # a job without data: where no mode can start its first batch before
                            "floor_ratio": ratio(floor, baseline),
                            "beyond_floor": None if floor is None or first is None or baseline is None else
                            ratio(first - floor, baseline - floor)})
        out.append({"dataset": d, "goal": "File download >= 1.0x aws s3 sync",
                    "ratio": ratio(file.get("download_mbps"), (r.get("aws") or {}).get("sync_mbps")),
                    "bound": GOAL_SYNC_RATIO, "at_most": False})
        for mode in ("FastFile", "FastFile rclone"):
            out.append({"dataset": d, "goal": f"{mode} epoch 2 <= 1.2x local files",
                        "ratio": ratio((r.get(mode) or {}).get("epoch2_s"), file.get("epoch2_s")),
                        "bound": GOAL_SECOND_EPOCH, "at_most": True})
    for g in out:
        g["met"] = None if g["ratio"] is None else (g["ratio"] <= g["bound"]) if g["at_most"] else \
            (g["ratio"] >= g["bound"])
    return out


def goal_lines(found: list[dict]) -> tuple[str, str]:
    """The goals, and for a first batch's: a job without data's start against the bound (`floor`: above it,
    no input mode can meet it), and the mode's first batch after that start against File mode's."""
    verdict = {True: "met", False: "NOT met", None: "not measured"}
    plain = [f"{'':5} {'goal':44} {'measured':>9}  {'verdict':12} {'floor':>7} {'beyond it':>9}"]
    md = ["| dataset | goal | measured | | a job without data's start | first batch after that start |",
          "|---|---|---:|---|---:|---:|"]

    def x(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}x"

    for g in found:
        said = verdict[g["met"]]
        if g["met"] is False and (g.get("floor_ratio") or 0) > g["bound"]:
            said += " (floor)"   # the start alone is over the bound
        plain.append(f"{g['dataset']:5} {g['goal']:44} {x(g['ratio']):>9}  {said:12} {x(g.get('floor_ratio')):>7} "
                     f"{x(g.get('beyond_floor')):>9}")
        md.append(f"| {g['dataset']} | {g['goal']} | {x(g['ratio'])} | {said} | {x(g.get('floor_ratio'))} | "
                  f"{x(g.get('beyond_floor'))} |")
    return "\n".join(plain), "\n".join(md)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=2048, help="each dataset's total size in MiB (default 2048)")
    parser.add_argument("--datasets", default=",".join(DATASETS),
                        help=f"comma-separated, of {', '.join(DATASETS)} (default both)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma-separated, of {', '.join(MODES)} (default all; the goals need them all)")
    parser.add_argument("--aws", help=f"the aws command to compare with (default {DEBIAN_AWS}, else aws on PATH)")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (SHIPYARD_HOME, logs)")
    args = parser.parse_args()
    datasets = [d for d in args.datasets.split(",") if d]
    if not datasets or any(d not in DATASETS for d in datasets):
        parser.error(f"--datasets: choose from {', '.join(DATASETS)}")
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes: choose from {', '.join(MODES)}")
    aws = find_aws(args.aws)
    if aws is None:
        sys.exit(f"aws (awscli) not found: install it with {AWS_HINT}")
    aws_version = subprocess.run([aws, "--version"], capture_output=True, text=True).stdout.strip().split(" ")[0]

    import psutil

    from shipyard import Estimator  # noqa: F401  (imported before the first measured submission)
    from shipyard.inputs import TrainingInput  # noqa: F401
    from shipyard.sdk.job import TrainingJob

    total = args.size_mb * MIB
    workdir, source = workspace("shipyard-input-modes-", script="")   # a temporary SHIPYARD_HOME too
    (source / "bench_input.py").write_text(SCRIPT)
    (source / "prime.py").write_text("import time\nprint(f'BENCH_START {time.time()}', flush=True)\n")
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": REGION})
    print(f"workdir {workdir}; {os.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.0f} GiB, load "
          f"average {os.getloadavg()[0]:.2f}; {aws} ({aws_version}); {len(datasets)} x {args.size_mb} MiB", flush=True)
    started = time.perf_counter()
    data = os.urandom(total)
    results: dict[str, dict] = {}
    servers: dict[str, dict] = {}
    pools: dict[str, str] = {}
    try:
        for dataset in datasets:
            results[dataset] = {}
            pieces = layout(total, DATASETS[dataset])
            # A fresh server per dataset: moto holds the objects twice (its buffers and the bytes cache).
            moto = Moto(workdir / f"moto-{dataset}.log")
            try:
                os.environ["SHIPYARD_S3_ENDPOINT_URL"] = moto.endpoint
                t0 = time.perf_counter()
                upload(moto.endpoint, dataset, data, pieces)
                servers[dataset] = {"upload_s": time.perf_counter() - t0, "moto_rss_mib": rss_mib(moto.process.pid)}
                settle()
                print(f"{dataset}: {len(pieces):,} objects of {pieces[0][2]:,} bytes uploaded to {moto.endpoint} in "
                      f"{servers[dataset]['upload_s']:.1f}s; moto RSS {servers[dataset]['moto_rss_mib']:.0f} MiB, "
                      f"available {psutil.virtual_memory().available / 2**30:.1f} GiB", flush=True)
                expected = {"bytes": total, "files": {"File": len(pieces), "FastFile": len(pieces), "Pipe": 1},
                            "first_sha256": hashlib.sha256(data[:min(MIB, total)]).hexdigest()}
                syncs: list[dict] = []   # aws s3 sync's runs, each after a cold File job
                floor = results[dataset]["floor"] = {"cold_s_runs": [start_floor(source, dataset, False)[1]
                                                                    for _ in range(REPEATS)]}
                for mode, warm in RUNS:
                    if mode not in modes:
                        continue
                    if warm and pools.get(dataset) is None:
                        pools[dataset] = make_pool(source, dataset)
                        floor["warm_s_runs"] = []
                        for _ in range(REPEATS):
                            pools[dataset], seconds = start_floor(source, dataset, True)
                            floor["warm_s_runs"].append(seconds)
                    name = column(mode, warm)
                    t0 = time.perf_counter()
                    try:
                        runs = []
                        for repeat in range(REPEATS if mode in REPEATED else 1):
                            runs.append(run_job(source, dataset, mode, moto, expected, warm, first_only=repeat > 0))
                            if mode == "File" and not warm:   # each right after a download, on the same endpoint
                                syncs.append(run_aws_sync(aws, moto, dataset, workdir, expected))
                        results[dataset][name] = r = repeated(runs)
                        if warm:
                            pools[dataset] = runs[-1]["job"]   # the pool's latest job is the one that releases it
                        print(f"{dataset} {name:13} {time.perf_counter() - t0:6.1f}s  first batch "
                              f"{r['first_batch_s']:.2f}s (median of {len(runs)}), epoch 1 {r['epoch1_s']:.2f}s"
                              + (f", epoch 2 {r['epoch2_s']:.2f}s" if "epoch2_s" in r else "")
                              + (f", download {r['download_s']:.2f}s" if "download_s" in r else ""), flush=True)
                    except Exception as exc:   # the column says so; the other modes still run
                        results[dataset][name] = {"error": f"{type(exc).__name__}: {str(exc)[:1500]}"}
                        print(f"{dataset} {name:13} FAILED: {results[dataset][name]['error']}", flush=True)
                try:
                    if not syncs:
                        raise RuntimeError("not run: File mode was not (--modes), or failed")
                    r = results[dataset]["aws"] = dict(syncs[0], sync_s_runs=[run["sync_s"] for run in syncs])
                    r["sync_s"] = statistics.median(r["sync_s_runs"])
                    r["sync_mbps"] = r["sync_bytes"] / r["sync_s"] / 1e6
                    print(f"{dataset} aws s3 sync {r['sync_s']:.2f}s ({r['sync_mbps']:.0f} MB/s, median of "
                          f"{len(syncs)})", flush=True)
                except Exception as exc:
                    results[dataset]["aws"] = {"error": f"{type(exc).__name__}: {str(exc)[:1500]}"}
                    print(f"{dataset} aws s3 sync FAILED: {results[dataset]['aws']['error']}", flush=True)
                servers[dataset]["moto_rss_end_mib"] = rss_mib(moto.process.pid)
            finally:
                if pools.get(dataset):   # its agent's environment names this dataset's endpoint
                    TrainingJob(pools[dataset]).update(keep_alive_period_in_seconds=0)
                moto.stop()
                clear(workdir)
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    found = goals(results, datasets)
    plain_cold, md_cold = table(results, datasets, False)
    plain_warm, md_warm = table(results, datasets, True)
    plain_sync, md_sync = sync_table(results, datasets)
    plain_goals, md_goals = goal_lines(found)
    sizes = ", ".join(f"{d} = {DATASETS[d]:,} objects" for d in datasets)
    print(f"\nInput modes, {args.size_mb} MiB per dataset ({sizes}), moto on 127.0.0.1, one 1-instance job per "
          f"cell; {time.perf_counter() - started:.0f}s in all")
    print(plain_cold)
    print()
    print(plain_warm)
    print()
    print(plain_sync)
    print(f"\nGoals ({aws_version} for aws s3 sync):")
    print(plain_goals)
    for dataset in datasets:
        for name, r in results[dataset].items():
            if "error" in r:
                print(f"{dataset} {name}: {r['error']}")
    print("\n" + md_cold + "\n\n" + md_warm + "\n\n" + md_sync + "\n\n" + md_goals)
    if args.json:
        from importlib.metadata import version

        document = {
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "machine": {"cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
                        "platform": platform.platform(), "python": platform.python_version(),
                        "moto": version("moto"), "aws": aws_version,
                        "rclone": subprocess.run(["rclone", "version"], capture_output=True,
                                                 text=True).stdout.split("\n")[0]},
            "setup": {"size_mib": args.size_mb, "datasets": {d: DATASETS[d] for d in datasets}, "epochs": EPOCHS},
            "servers": servers, "results": results, "goals": found,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
