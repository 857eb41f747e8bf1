"""Which FUSE component should serve FastFile input mode: rclone's VFS mount, s3fs-fuse or fsspec's FUSE,
against File mode's plain download, side by side on the same S3 prefix.

    .venv/bin/python benchmarks/fastfile_mounts.py [--repeat 2] [--json results.json] [--keep]

FastFile mode mounts /opt/ml/input/data/<channel> as a read-only POSIX view of an S3 prefix whose bytes are
fetched on first read. Here moto's S3 server (a subprocess, objects in memory, a WSGI wrapper counting
requests and the response bytes it has handed to the socket) holds two datasets under s3://fastfile/data/:
1,000 objects of 64 KiB in 10 "directories" and 4 objects of 128 MiB. Each candidate that is installed
mounts that prefix read-only in a temporary directory under /tmp, each time a fresh mount with an empty
cache (the full pass --repeat times, the table has the medians; then the head-only script once):
  full pass   ready (from starting the daemon until /proc/self/mountinfo shows the mount and listing its
              root works), os.walk + stat of every file, open + the first 1 KiB of a large object, every
              large object read sequentially (1 MiB reads), every small object read, then the first large
              object read again (what a second epoch sees: the component's cache, or the kernel's)
  head-only   a script reading only the first 1 MiB of each large object: its time (with the mount's
              ready time), the object bytes S3 sent for it (counted at moto until they stop growing:
              read-ahead left running in the background counts) and the local cache's real disk use (du)
Every byte read is compared with what was uploaded. Candidates:
  rclone      `rclone mount` (VFS, --vfs-cache-mode full, --cache-dir in the temporary directory), a remote
              made of RCLONE_CONFIG_SRC_* variables; four read-ahead settings (RCLONE_VARIANTS): the best
              (of those within 10% of the best large-object throughput, the one fetching least for the
              head-only script) goes in the main table, all of them in the second one
  s3fs        s3fs-fuse, plain, with -o use_cache=DIR, and with -o kernel_cache (libfuse keeps a file's pages
              in the kernel's page cache between opens, which rclone 1.60's mount does not: the second read)
  fsspec      fsspec.fuse's FUSEr over s3fs (the Python one) served by fusepy (FUSE(..., ro=True), no
              threads, as fsspec.fuse.run does), in a subprocess; fusepy is not a dependency: it is taken
              from --fusepy (default /tmp/fusepy: `pip install --target /tmp/fusepy fusepy`)
  local files File mode: shipyard.storage.transfer.download() of the prefix, then the same reads from disk
              (just written, so from the page cache); its "ready" is the download
A daemon that does not answer within a time limit is killed (its pending reads then fail) and its column
says so; nothing stays mounted or running. The moto server is Python on the same cores as the daemons
and the reader: throughputs are relative, not what S3 would give. Single-pass numbers vary by 10-20% from
pass to pass on a 2-CPU machine."""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from run import workspace  # noqa: E402

BUCKET, PREFIX, REGION = "fastfile", "data", "us-east-1"
KIB, MIB = 1024, 1024 * 1024
SMALL_COUNT, SMALL_SIZE, SMALL_DIRS = 1000, 64 * KIB, 10
LARGE_COUNT, LARGE_SIZE = 4, 128 * MIB
READ = 1 * MIB          # the reader's read size
HEAD = 1 * MIB          # what the head-only script reads of each large object
READY_TIMEOUT_S = 60    # a mount not usable by then fails
SESSION_TIMEOUT_S = 150  # a mount still busy by then is killed
STATS_PATH = "/__bench_stats__"

# moto's S3 server with a WSGI wrapper that counts requests by kind and the response bytes handed to the
# socket (bodies go out in 256 KiB pieces, each counted once written, so a reader that closes its stream
# early is counted to within a piece and the socket buffers). Objects stay in memory (the key buffer
# size), and a key's bytes are read out of its buffer once: moto copies the whole object for every GET,
# ranged or not (~70 ms for 128 MiB here), which would charge a component per request, not per byte.
MOTO_SCRIPT = r'''
import json, logging, os, sys, threading
os.environ["MOTO_S3_DEFAULT_KEY_BUFFER_SIZE"] = str(1 << 30)
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from moto.s3.models import FakeKey
from werkzeug.serving import make_server

_get, _set = FakeKey.value.fget, FakeKey.value.fset

def _value(self):
    value = self.__dict__.get("_bench_value")
    if value is None:
        value = self.__dict__["_bench_value"] = _get(self)
    return value

def _set_value(self, new):
    self.__dict__.pop("_bench_value", None)
    _set(self, new)

FakeKey.value = property(_value, _set_value)

STATS, PIECE = sys.argv[1], 256 * 1024
logging.getLogger("werkzeug").setLevel(logging.ERROR)
lock = threading.Lock()
counts = {"requests": 0, "get": 0, "list": 0, "head": 0, "other": 0, "bytes": 0, "object_bytes": 0}
moto = DomainDispatcherApplication(create_backend_app)

def app(environ, start_response):
    path = environ.get("PATH_INFO", "")
    if path == STATS:
        with lock:
            body = json.dumps(counts).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]
    method = environ["REQUEST_METHOD"]
    key = path.lstrip("/").partition("/")[2]
    kind = "head" if method == "HEAD" else ("get" if key else "list") if method == "GET" else "other"
    with lock:
        counts["requests"] += 1
        counts[kind] += 1
    result = moto(environ, start_response)

    def body():
        try:
            for chunk in result:
                for start in range(0, len(chunk), PIECE):
                    piece = chunk[start:start + PIECE]
                    yield piece
                    with lock:  # resumed: the piece was written
                        counts["bytes"] += len(piece)
                        if kind == "get":
                            counts["object_bytes"] += len(piece)
        finally:
            if hasattr(result, "close"):
                result.close()
    return body()

server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
print(server.server_address[1], flush=True)
server.serve_forever()
'''

# fsspec's FUSE operations over s3fs, served by fusepy as fsspec.fuse.run() does (foreground, no threads),
# but read-only: run() has no way to pass ro=True.
FSSPEC_SCRIPT = r'''
import sys
endpoint, root, mountpoint, fusepy = sys.argv[1:5]
sys.path.insert(0, fusepy)
import fuse, fsspec.fuse, s3fs
fs = s3fs.S3FileSystem(key="testing", secret="testing",
                       client_kwargs={"endpoint_url": endpoint, "region_name": "us-east-1"})
fuse.FUSE(fsspec.fuse.FUSEr(fs, root), mountpoint, nothreads=True, foreground=True, ro=True)
'''

RCLONE_BASE = ["--read-only", "--config", "/dev/null", "--vfs-cache-mode", "full", "--vfs-cache-max-size", "2G",
               "--dir-cache-time", "1000h", "--no-modtime"]
# rclone 1.60's defaults: --buffer-size 16M, --vfs-read-ahead 0, --vfs-read-chunk-size 128M (doubling).
RCLONE_VARIANTS = {
    "rclone": [],
    "rclone ra256": ["--buffer-size", "32M", "--vfs-read-ahead", "256M"],
    "rclone mra1M": ["--buffer-size", "32M", "--vfs-read-ahead", "256M", "--max-read-ahead", "1M"],
    "rclone c4": ["--buffer-size", "16M", "--vfs-read-ahead", "128M", "--vfs-read-chunk-size", "4M",
                  "--vfs-read-chunk-size-limit", "256M"],
}


# -- data --------------------------------------------------------------------------------------------
class Data:
    """The objects' contents: slices of one random buffer (large object i is it rotated by i x 33 MiB + i)."""

    def __init__(self) -> None:
        self.base = os.urandom(LARGE_SIZE)
        self.small = {f"small/part{j % SMALL_DIRS:02d}/{j:04d}.bin": j for j in range(SMALL_COUNT)}
        self.large = {f"large/object{i}.bin": i for i in range(LARGE_COUNT)}

    def small_bytes(self, j: int) -> bytes:
        return self.base[j * SMALL_SIZE:(j + 1) * SMALL_SIZE]

    def large_bytes(self, i: int, offset: int, size: int) -> bytes:
        start = (i * 33 * MIB + i + offset) % LARGE_SIZE
        size = min(size, LARGE_SIZE - offset)
        end = start + size
        return self.base[start:end] if end <= LARGE_SIZE else self.base[start:] + self.base[:end - LARGE_SIZE]

    @property
    def total_bytes(self) -> int:
        return SMALL_COUNT * SMALL_SIZE + LARGE_COUNT * LARGE_SIZE


def upload(endpoint: str, data: Data) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)
    client.create_bucket(Bucket=BUCKET)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{item[0]}",
                                                     Body=data.small_bytes(item[1])), data.small.items()))
    for key, i in data.large.items():
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{key}", Body=data.large_bytes(i, 0, LARGE_SIZE))


class Moto:
    def __init__(self, logfile: Path) -> None:
        self.log = open(logfile, "wb")
        self.process = subprocess.Popen([sys.executable, "-c", MOTO_SCRIPT, STATS_PATH], stdout=subprocess.PIPE,
                                        stderr=self.log, stdin=subprocess.DEVNULL)
        line = self.process.stdout.readline()
        if not line.strip():
            raise RuntimeError(f"moto did not start: {logfile.read_text()[-2000:]}")
        self.endpoint = f"http://127.0.0.1:{int(line)}"
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def stats(self) -> dict:
        with self.opener.open(self.endpoint + STATS_PATH, timeout=30) as response:
            return json.loads(response.read())

    def settled(self, quiet_s: float = 1.0, limit_s: float = 15.0) -> dict:
        """The counts once they have not changed for `quiet_s` (read-ahead left running has finished)."""
        last, since, deadline = self.stats(), time.monotonic(), time.monotonic() + limit_s
        while time.monotonic() - since < quiet_s and time.monotonic() < deadline:
            time.sleep(0.25)
            now = self.stats()
            if now != last:
                last, since = now, time.monotonic()
        return last

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


# -- mounts ------------------------------------------------------------------------------------------
def mountpoints() -> set[str]:
    with open("/proc/self/mountinfo") as f:
        return {line.split()[4].replace("\\040", " ") for line in f}


@dataclass
class Candidate:
    name: str
    kind: str                      # rclone, s3fs, fsspec
    flags: list[str] = field(default_factory=list)
    cache_dir: bool = True         # whether it keeps its cache in a directory du can measure

    def missing(self, fusepy: Path) -> str | None:
        """Why this candidate cannot run here (an install hint), or None."""
        if not Path("/dev/fuse").exists():
            return "no /dev/fuse"
        if self.kind in ("rclone", "s3fs") and not shutil.which(self.kind):
            return f"{self.kind} not found: apt-get install {self.kind}"
        if self.kind == "s3fs" and not (shutil.which("fusermount") or shutil.which("fusermount3")):
            return "fusermount not found: apt-get install fuse3"
        if self.kind == "fsspec":
            if not (fusepy / "fuse.py").exists():
                return f"fusepy not in {fusepy}: pip install --target {fusepy} fusepy"
            if not ctypes.util.find_library("fuse"):
                return "libfuse2 not found: apt-get install libfuse2"
        return None

    def command(self, endpoint: str, mountpoint: Path, cache: Path, work: Path, fusepy: Path) -> tuple[list, dict]:
        env = dict(os.environ)
        if self.kind == "rclone":
            env.pop("AWS_CA_BUNDLE", None)  # rclone 1.60: LoadCustomCABundleError ... unsupported transport
            env.update({"RCLONE_CONFIG_SRC_TYPE": "s3", "RCLONE_CONFIG_SRC_PROVIDER": "Other",
                        "RCLONE_CONFIG_SRC_ENDPOINT": endpoint, "RCLONE_CONFIG_SRC_ACCESS_KEY_ID": "testing",
                        "RCLONE_CONFIG_SRC_SECRET_ACCESS_KEY": "testing", "RCLONE_CONFIG_SRC_REGION": REGION})
            return ["rclone", "mount", f"src:{BUCKET}/{PREFIX}", str(mountpoint), *RCLONE_BASE,
                    "--cache-dir", str(cache), *self.flags], env
        if self.kind == "s3fs":
            passwd = work / "passwd"
            passwd.write_text("testing:testing")
            passwd.chmod(0o600)
            options = [f"url={endpoint}", "use_path_request_style", f"passwd_file={passwd}", "ro", "nonempty",
                       f"endpoint={REGION}", *(flag.replace("CACHE", str(cache)) for flag in self.flags)]
            return ["s3fs", f"{BUCKET}:/{PREFIX}", str(mountpoint), "-f", "-o", ",".join(options)], env
        return [sys.executable, "-c", FSSPEC_SCRIPT, endpoint, f"{BUCKET}/{PREFIX}/", str(mountpoint),
                str(fusepy)], env


class Mount:
    """One mount of a candidate in `work`: started by entering, unmounted (and its daemon gone) on exit, even
    when what ran inside failed. A watchdog kills a daemon that is still mounted after SESSION_TIMEOUT_S."""

    def __init__(self, candidate: Candidate, endpoint: str, work: Path, fusepy: Path) -> None:
        self.candidate, self.work = candidate, work
        self.mountpoint, self.cache = work / "mnt", work / "cache"
        self.mountpoint.mkdir(parents=True)
        self.cache.mkdir()
        self.argv, self.env = candidate.command(endpoint, self.mountpoint, self.cache, work, fusepy)
        self.logfile = work / "daemon.log"
        self.process: subprocess.Popen | None = None
        self.killed = False
        self.unmount_s: float | None = None

    def log_errors(self) -> list[str]:
        """The daemon's log lines that report an error (rclone ERROR, s3fs [ERR], a Python traceback)."""
        text = self.logfile.read_text(errors="replace") if self.logfile.exists() else ""
        return [line for line in text.splitlines() if any(m in line for m in ("ERROR", "[ERR]", "Traceback"))]

    def log_tail(self) -> str:
        return self.logfile.read_text(errors="replace")[-1500:] if self.logfile.exists() else ""

    def __enter__(self) -> Mount:
        t0 = time.perf_counter()
        with open(self.logfile, "wb") as log:
            self.process = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        self.watchdog = threading.Timer(SESSION_TIMEOUT_S, self.kill)
        self.watchdog.daemon = True
        self.watchdog.start()
        try:
            deadline = t0 + READY_TIMEOUT_S
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"{self.argv[0]} exited with {self.process.returncode}: {self.log_tail()}")
                if str(self.mountpoint) in mountpoints():
                    try:
                        os.listdir(self.mountpoint)
                        break
                    except OSError:
                        pass
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"not mounted after {READY_TIMEOUT_S}s: {self.log_tail()}")
                time.sleep(0.005)
            self.ready_s = time.perf_counter() - t0
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def kill(self) -> None:
        """Kill the daemon: the kernel then fails its pending and later requests (ENOTCONN)."""
        if self.process is not None and self.process.poll() is None:
            self.killed = True
            self.process.kill()

    def __exit__(self, *exc) -> None:
        self.watchdog.cancel()
        t0 = time.perf_counter()
        for tool in ("fusermount3", "fusermount"):
            if str(self.mountpoint) not in mountpoints():
                break
            if shutil.which(tool):
                subprocess.run([tool, "-u", str(self.mountpoint)], capture_output=True)
        try:
            self.process.wait(10)   # each of them exits once unmounted
        except subprocess.TimeoutExpired:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        clean = str(self.mountpoint) not in mountpoints()
        if not clean:   # busy or a dead daemon: detach it lazily
            for argv in (["fusermount3", "-uz"], ["fusermount", "-uz"], ["umount", "-l"]):
                if str(self.mountpoint) in mountpoints() and shutil.which(argv[0]):
                    subprocess.run([*argv, str(self.mountpoint)], capture_output=True)
        if str(self.mountpoint) in mountpoints():
            raise RuntimeError(f"{self.mountpoint} is still mounted")
        self.unmount_s = time.perf_counter() - t0 if clean else None


def disk_use(path: Path) -> int:
    """Bytes of disk `path` really uses (allocated blocks: sparse cache files count what they hold)."""
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


# -- what a training script does ---------------------------------------------------------------------
def read_all(path: Path, expected) -> int:
    """Read `path` sequentially in READ pieces, each compared with expected(offset, size); bytes read."""
    buffer = bytearray(READ)
    offset = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buffer)
            if not n:
                return offset
            if (buffer if n == READ else buffer[:n]) != expected(offset, n):   # memcmp
                raise RuntimeError(f"{path}: wrong bytes at {offset}")
            offset += n


def full_pass(root: Path, data: Data, moto: Moto, out: dict) -> None:
    """Fills `out` as it goes, so a failing step keeps the measures taken before it."""
    s0 = moto.stats()
    t0 = time.perf_counter()
    files = size = 0
    for directory, _, names in os.walk(root):
        for name in names:
            files += 1
            size += os.stat(os.path.join(directory, name)).st_size
    out["list_s"] = time.perf_counter() - t0
    if (files, size) != (len(data.small) + len(data.large), data.total_bytes):
        raise RuntimeError(f"listed {files} files of {size} bytes, expected {len(data.small) + len(data.large)} "
                           f"of {data.total_bytes}")
    out["list_requests"] = moto.stats()["requests"] - s0["requests"]

    first = next(iter(data.large))
    t0 = time.perf_counter()
    with open(root / first, "rb", buffering=0) as f:
        head = f.read(KIB)
    out["first_kib_ms"] = (time.perf_counter() - t0) * 1000
    if head != data.large_bytes(0, 0, KIB):
        raise RuntimeError(f"{first}: wrong first KiB")

    t0 = time.perf_counter()
    read = sum(read_all(root / key, lambda o, n, i=i: data.large_bytes(i, o, n)) for key, i in data.large.items())
    out["large_mbps"] = read / (time.perf_counter() - t0) / 1e6
    if read != LARGE_COUNT * LARGE_SIZE:
        raise RuntimeError(f"read {read} bytes of the large objects")

    t0 = time.perf_counter()
    for key, j in data.small.items():
        with open(root / key, "rb", buffering=0) as f:
            if f.read() != data.small_bytes(j):
                raise RuntimeError(f"{key}: wrong bytes")
    out["small_fps"] = len(data.small) / (time.perf_counter() - t0)

    t0 = time.perf_counter()
    read = read_all(root / first, lambda o, n: data.large_bytes(0, o, n))
    out["cached_mbps"] = read / (time.perf_counter() - t0) / 1e6
    out["pass_fetched_mib"] = (moto.stats()["object_bytes"] - s0["object_bytes"]) / MIB


def head_only(root: Path, data: Data) -> float:
    """A script that reads only the first HEAD bytes of each large object: its seconds."""
    t0 = time.perf_counter()
    for key, i in data.large.items():
        with open(root / key, "rb", buffering=0) as f:
            got = bytearray()
            while len(got) < HEAD:
                piece = f.read(HEAD - len(got))
                if not piece:
                    break
                got += piece
        if got != data.large_bytes(i, 0, HEAD):
            raise RuntimeError(f"{key}: wrong first MiB")
    return time.perf_counter() - t0


# -- runs --------------------------------------------------------------------------------------------
def median_of(passes: list[dict]) -> dict:
    """Each measure's median over the passes that took it."""
    keys = {key for p in passes for key, value in p.items() if isinstance(value, (int, float))}
    return {key: statistics.median(p[key] for p in passes if p.get(key) is not None) for key in keys
            if any(p.get(key) is not None for p in passes)}


def run_mounted(candidate: Candidate, moto: Moto, data: Data, workdir: Path, fusepy: Path, repeat: int) -> dict:
    """`repeat` full passes, each on a fresh mount (medians), then the head-only script on another."""
    out: dict = {"flags": candidate.flags}
    if not candidate.cache_dir:
        out["not_applicable"] = ["pass_disk_mib", "head_disk_mib"]
    slug = candidate.name.replace(" ", "-")
    passes: list[dict] = []
    errors: list[str] = []
    step, mount = "", None
    try:
        for r in range(repeat):
            step = f"full pass {r + 1}"
            measures: dict = {}
            passes.append(measures)
            mount = Mount(candidate, moto.endpoint, workdir / slug / f"pass{r + 1}", fusepy)
            out["command"] = " ".join(a if " " not in a else repr(a) for a in mount.argv)
            with mount:
                measures["ready_s"] = mount.ready_s
                full_pass(mount.mountpoint, data, moto, measures)
                if candidate.cache_dir:
                    measures["pass_disk_mib"] = disk_use(mount.cache) / MIB
            measures["unmount_s"] = mount.unmount_s
            errors += mount.log_errors()
            shutil.rmtree(mount.cache, ignore_errors=True)

        step = "head-only"
        s0 = moto.stats()
        mount = Mount(candidate, moto.endpoint, workdir / slug / "head", fusepy)
        with mount:
            out["head_job_s"] = mount.ready_s + head_only(mount.mountpoint, data)
            out["head_fetched_mib"] = (moto.settled()["object_bytes"] - s0["object_bytes"]) / MIB
            if candidate.cache_dir:
                out["head_disk_mib"] = disk_use(mount.cache) / MIB
        errors += mount.log_errors()
        shutil.rmtree(mount.cache, ignore_errors=True)
    except Exception as exc:  # the column says so; the other candidates still run
        killed = f" (killed after {SESSION_TIMEOUT_S}s)" if mount is not None and mount.killed else ""
        out["error"] = f"{step}{killed}: {type(exc).__name__}: {str(exc)[:600]}"
        if mount is not None:
            errors += mount.log_errors()
    out.update(median_of(passes))
    out["passes"] = passes
    out["log_errors"] = len(errors)
    if errors:
        out["log_error_first"] = errors[0][:300]
    return out


def run_local(moto: Moto, data: Data, workdir: Path, repeat: int) -> dict:
    """File mode: download the prefix with shipyard's own code, then read it from disk (`repeat` times, medians)."""
    from shipyard.storage import transfer

    out: dict = {"not_applicable": ["unmount_s", "log_errors"]}
    passes: list[dict] = []
    try:
        for r in range(repeat):
            measures: dict = {}
            passes.append(measures)
            dest = workdir / "local" / f"data{r + 1}"
            s0 = moto.stats()
            t0 = time.perf_counter()
            transfer.download(f"s3://{BUCKET}/{PREFIX}", dest)
            measures["ready_s"] = time.perf_counter() - t0
            fetched = (moto.stats()["object_bytes"] - s0["object_bytes"]) / MIB
            full_pass(dest, data, moto, measures)
            measures["pass_fetched_mib"] = fetched   # everything, before the pass
            measures["pass_disk_mib"] = disk_use(dest) / MIB
            # File mode downloads everything before the script starts.
            measures["head_job_s"] = measures["ready_s"] + head_only(dest, data)
            measures["head_fetched_mib"] = fetched
            measures["head_disk_mib"] = measures["pass_disk_mib"]
            shutil.rmtree(dest)
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {str(exc)[:600]}"
    finally:
        shutil.rmtree(workdir / "local", ignore_errors=True)
    out.update(median_of(passes))
    out["passes"] = passes
    return out


# -- report ------------------------------------------------------------------------------------------
PASS_READ_MIB = (KIB + LARGE_COUNT * LARGE_SIZE + SMALL_COUNT * SMALL_SIZE + LARGE_SIZE) / MIB
ROWS = [
    ("ready_s", "ready (s): mounted + root listed / download", "{:.2f}"),
    ("list_s", "walk + stat all 1,004 files (s)", "{:.2f}"),
    ("list_requests", "  S3 requests for that", "{:.0f}"),
    ("first_kib_ms", "open + first 1 KiB of a 128 MiB file (ms)", "{:.1f}"),
    ("large_mbps", "4 x 128 MiB, first read (MB/s)", "{:.0f}"),
    ("small_fps", "1,000 x 64 KiB, first read (files/s)", "{:.0f}"),
    ("cached_mbps", "1 x 128 MiB, second read (MB/s)", "{:.0f}"),
    ("pass_fetched_mib", f"S3 object bytes, pass reads {PASS_READ_MIB:.0f} MiB (MiB)", "{:.0f}"),
    ("pass_disk_mib", "local disk used after the pass, du (MiB)", "{:.0f}"),
    ("head_job_s", "head-only job: ready + 4 x first 1 MiB (s)", "{:.2f}"),
    ("head_fetched_mib", "  S3 object bytes for its 4 MiB (MiB)", "{:.1f}"),
    ("head_disk_mib", "  local disk used, du (MiB)", "{:.1f}"),
    ("unmount_s", "unmount + daemon exit (s)", "{:.2f}"),
    ("log_errors", "error lines in the daemon's logs", "{:d}"),
]


def cell(result: dict | None, key: str, fmt: str) -> str:
    if result is None:
        return "skipped"
    value = result.get(key)
    if value is None:   # not measured: not applicable, or a failed (or unclean) step
        return "-" if key in result.get("not_applicable", ()) else "failed"
    return fmt.format(value)


def tables(results: dict[str, dict | None], columns: list[str]) -> tuple[str, str]:
    """(plain, markdown) tables of `columns`."""
    width = max(len(label) for _, label, _ in ROWS)
    plain = [f"{'':{width}} " + " ".join(f"{c:>12}" for c in columns)]
    md = ["| measure | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for key, label, fmt in ROWS:
        cells = [cell(results[c], key, fmt) for c in columns]
        plain.append(f"{label:{width}} " + " ".join(f"{v:>12}" for v in cells))
        md.append(f"| {label.strip()} | " + " | ".join(cells) + " |")
    return "\n".join(plain), "\n".join(md)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fusepy", type=Path, default=Path("/tmp/fusepy"),
                        help="where fusepy is installed (pip install --target DIR fusepy); default /tmp/fusepy")
    parser.add_argument("--repeat", type=int, default=2, help="full passes per candidate, each on a fresh mount; "
                        "the table has their medians (default 2)")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    args = parser.parse_args()

    workdir, _ = workspace("shipyard-fastfile-", script="")  # a temporary SHIPYARD_HOME too
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": REGION})
    candidates = [Candidate(name, "rclone", flags) for name, flags in RCLONE_VARIANTS.items()]
    candidates += [Candidate("s3fs", "s3fs", cache_dir=False), Candidate("s3fs cache", "s3fs", ["use_cache=CACHE"]),
                   Candidate("s3fs kernel_cache", "s3fs", ["kernel_cache"], cache_dir=False),
                   Candidate("fsspec", "fsspec", cache_dir=False)]
    results: dict[str, dict | None] = {}
    skipped: dict[str, str] = {}
    moto = None
    started = time.perf_counter()
    try:
        moto = Moto(workdir / "moto.log")
        os.environ["SHIPYARD_S3_ENDPOINT_URL"] = moto.endpoint
        print(f"workdir {workdir}; moto at {moto.endpoint}; {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.2f}", flush=True)
        t0 = time.perf_counter()
        data = Data()
        upload(moto.endpoint, data)
        print(f"uploaded {len(data.small)} x {SMALL_SIZE // KIB} KiB + {len(data.large)} x {LARGE_SIZE // MIB} MiB "
              f"in {time.perf_counter() - t0:.1f}s", flush=True)

        t0 = time.perf_counter()
        results["local files"] = run_local(moto, data, workdir, args.repeat)
        print(f"local files  {time.perf_counter() - t0:6.1f}s {results['local files'].get('error', 'ok')}", flush=True)
        for candidate in candidates:
            why = candidate.missing(args.fusepy)
            if why:
                results[candidate.name] = None
                skipped[candidate.name] = why
                print(f"{candidate.name:12} skipped: {why}", flush=True)
                continue
            t0 = time.perf_counter()
            results[candidate.name] = run_mounted(candidate, moto, data, workdir, args.fusepy, args.repeat)
            r = results[candidate.name]
            print(f"{candidate.name:12} {time.perf_counter() - t0:6.1f}s "
                  f"{r.get('error', 'ok')}  large {r.get('large_mbps', 0):.0f} MB/s, small "
                  f"{r.get('small_fps', 0):.0f} files/s", flush=True)
    finally:
        if moto is not None:
            moto.stop()
        left = sorted(m for m in mountpoints() if m.startswith(str(workdir)))
        if args.keep:
            print(f"kept {workdir}")
        elif not left:
            shutil.rmtree(workdir, ignore_errors=True)
        if left:
            print(f"STILL MOUNTED: {left}", file=sys.stderr)

    # The best rclone setting: of those within 10% of the best large-object throughput, the one that
    # fetches least for the head-only script.
    rclones = [n for n in RCLONE_VARIANTS if results.get(n) and "large_mbps" in results[n]]
    best = "rclone"
    if rclones:
        top = max(results[n]["large_mbps"] for n in rclones)
        best = min((n for n in rclones if results[n]["large_mbps"] >= 0.9 * top),
                   key=lambda n: results[n].get("head_fetched_mib", float("inf")))
    main_columns = ["local files", best, "s3fs", "s3fs cache", "s3fs kernel_cache", "fsspec"]
    plain_main, md_main = tables(results, main_columns)
    plain_rclone, md_rclone = tables(results, list(RCLONE_VARIANTS))
    print(f"\nFastFile candidates, {len(data.small)} x 64 KiB + {len(data.large)} x 128 MiB on moto; full pass: "
          f"median of {args.repeat} fresh mounts; {time.perf_counter() - started:.0f}s in all")
    print(plain_main)
    print(f"\nrclone read-ahead settings (all with {' '.join(RCLONE_BASE)} --cache-dir DIR):")
    defaults = "(1.60 defaults: --buffer-size 16M --vfs-read-ahead 0 --vfs-read-chunk-size 128M)"
    for name, flags in RCLONE_VARIANTS.items():
        print(f"  {name:12} {' '.join(flags) or defaults}")
    print(plain_rclone)
    problems = {name: r["error"] for name, r in results.items() if r and "error" in r} | skipped
    for name, problem in problems.items():
        print(f"{name}: {problem}")
    for name, r in results.items():
        if r and r.get("log_errors"):
            print(f"{name}: {r['log_errors']} error lines in its logs, the first: {r['log_error_first']}")
    print(f"\nbest rclone ({best}; within 10% of the best throughput, least fetched for the head-only "
          f"script): rclone mount src:BUCKET/PREFIX MOUNTPOINT {' '.join(RCLONE_BASE)} "
          f"--cache-dir DIR {' '.join(RCLONE_VARIANTS.get(best, []))}")
    print("\n" + md_main + "\n\n" + md_rclone)
    if args.json:
        args.json.write_text(json.dumps({"command": " ".join(sys.argv), "results": results, "skipped": skipped,
                                         "best_rclone": best, "rclone_variants": RCLONE_VARIANTS}, indent=2))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
