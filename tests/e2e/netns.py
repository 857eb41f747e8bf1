"""Hosts that are really apart, on this machine: a NetnsCluster is N "hosts", each a network namespace on a
private bridge with an address of its own, its own mount, UTS and PID namespaces, and a Ray node started
in it the way users start one (`ray start --head` / `ray start --address HEAD:6379`). No other machine is
ever contacted: the bridge has no uplink and nothing is routed off it. With k the cluster's number in
this process:

    bridge  sy<pid>x<k>b          10.213.X.1/24   (this process's side: moto's S3 server listens here)
    host i  netns shipyard-<pid>-<k>-<i>, interface host<i>-eth  10.213.X.(i+2)/24, lo up; host 0 is Ray's head

What each host keeps apart (`nothing shared by accident`):
- network: its own namespace, so its own loopback, its own ports (every node uses Ray's default ports)
  and its own interface names (different on every host, so nothing passes by naming a fixed one);
- files: /tmp is a directory of its own (`host_dir(i)/tmp` seen from here, where the test can read it),
  /dev/shm a tmpfs of its own, /etc/hosts its own (its host name and the others'), HOME under its /tmp:
  Ray's session directories and shipyard's node directory (/tmp/shipyard-ray) are per host, and the
  test's own temporary directories are not visible on any host;
- processes: its own PID namespace (`ray start`'s process discovery, `ray stop`, psutil see only the
  host's processes), whose init (`holder`) reaps orphans; killing it kills everything on the host;
- host name: its own UTS namespace, named `node<i>`.

`run(i, argv)` / `popen(i, argv)` run a command on host i (nsenter into the holder's namespaces), with a
clean environment (PATH with this Python's bin directory first, HOME on the host) plus what is given;
`cut(i)` / `heal(i)` take host i's link down / up (its bridge port: the host keeps its address, as with
a pulled cable); `kill_node(i)` kills every process of host i but its holder (a machine that crashed,
whose network namespace stays), `start_node(i)` starts its Ray node again; `restart_head()` restarts the
head's Ray (`ray stop --force`, `ray start --head`), leaving what else runs on host 0.

Teardown (`close`, also when setup fails halfway) kills every holder (the kernel then kills all of the
host's processes, including the sandboxes nested in it), deletes the namespaces, the veths and the bridge,
and checks with psutil that no process of the cluster is left (none in its PID namespaces, none whose
environment carries its mark). It needs root: without it, or without `ip` / `unshare` / `nsenter`, or
where namespaces cannot be made, `NetnsCluster(...)` raises `Unavailable` with the reason (fixtures skip
with it)."""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

MARK = "SHIPYARD_NETNS_CLUSTER"   # in the environment of every process the cluster starts
RAY_PORT = 6379
# Ray's minimum is 75 MiB; the tests move no objects through it.
OBJECT_STORE_BYTES = 100 * 1024 * 1024

# The first process of every host (PID 1 of its PID namespace): says it is up, then reaps whatever is
# orphaned on the host (Ray's daemons are), so no zombie looks alive to anyone's liveness check.
HOLDER = """
import os, sys, time
print("holder up", flush=True)
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.2)
"""

# Run by the holder's shell, in the host's new mount namespace (private propagation), before it becomes
# the holder. The sources are bound before /tmp is covered: they live under this machine's /tmp. So may the
# checkout and its .venv (a clone in /tmp): each of SY_KEEP is bound at its own path in the host's /tmp.
SETUP = """set -e
mount --bind "$SY_HOSTS" /etc/hosts
mount -t tmpfs -o size=1g,mode=1777 tmpfs /dev/shm
for keep in $SY_KEEP; do
    mkdir -p "$SY_TMP${keep#/tmp}"
    mount --bind "$keep" "$SY_TMP${keep#/tmp}"
done
mount --rbind "$SY_TMP" /tmp
hostname "$SY_NAME"
cd /tmp
mkdir -p /tmp/home
exec "$SY_PYTHON" -c "$SY_HOLDER"
"""


_clusters = itertools.count()


def _kept_under_tmp() -> list[str]:
    """The directories right under /tmp that hold this checkout or its Python (hosts need both, and a
    host's /tmp is its own)."""
    kept = set()
    for path in (Path(__file__).resolve().parents[2], Path(sys.executable).parent.parent):
        if path.is_relative_to("/tmp") and path != Path("/tmp"):
            kept.add(str(Path("/tmp") / path.relative_to("/tmp").parts[0]))
    return sorted(kept)


class Unavailable(Exception):
    """Network namespaces cannot be made here; the message says why."""


def problem() -> str | None:
    """Why a NetnsCluster cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root to make network namespaces and a bridge (CI runs as root)"
    for tool in ("ip", "unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (iproute2 / util-linux) to make the hosts"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done


def _subnet(seed: int) -> ipaddress.IPv4Network:
    """A /24 of 10.213.0.0/16 that no address or route of this machine is in (parallel runs take
    different ones: the seed is the pid)."""
    taken = _ip("-4", "route", "show", "table", "all").stdout + _ip("-4", "addr").stdout
    for step in range(256):
        net = ipaddress.ip_network(f"10.213.{(seed + step) % 256}.0/24")
        if f"10.213.{net.network_address.packed[2]}." not in taken:
            return net
    raise Unavailable("every 10.213.X.0/24 is in use on this machine")


@contextlib.contextmanager
def s3_on_bridge(cluster: NetnsCluster, buckets: tuple[str, ...]):
    """moto's S3 server listening on the cluster's bridge (this machine's side), which every host reaches,
    with `buckets` made; yields its endpoint URL."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address=cluster.bridge_address, port=0, verbose=False)
    server.start()
    try:
        endpoint = "http://{}:{}".format(*server.get_host_and_port())
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                              aws_secret_access_key="testing")
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        yield endpoint
    finally:
        server.stop()


class NetnsCluster:
    """`size` hosts on a private bridge, a Ray node on each (host 0 is the head, with `head_cpus` CPUs;
    the others have `worker_cpus`). Files live under `base` (which must be empty or not exist)."""

    def __init__(self, base: Path, size: int = 3, *, head_cpus: int = 0, worker_cpus: int = 1,
                 ray: bool = True, ray_env: dict[str, str] | None = None) -> None:
        if (why := problem()) is not None:
            raise Unavailable(why)
        self.base = Path(base)
        self.size, self.head_cpus, self.worker_cpus, self.with_ray = size, head_cpus, worker_cpus, ray
        self.ray_env = ray_env or {}   # Ray's own settings for every node (RAY_health_check_period_ms, ...)
        pid, k = os.getpid(), next(_clusters) % 100   # clusters of one process do not clash either
        self.name = f"shipyard-{pid}-{k}"
        self.bridge = f"sy{pid}x{k}b"
        self.net = _subnet(pid + k)
        hosts = list(self.net.hosts())
        self.bridge_address = str(hosts[0])
        self.addresses = [str(hosts[i + 1]) for i in range(size)]
        self.namespaces = [f"{self.name}-{i}" for i in range(size)]
        self.interfaces = [f"host{i}-eth" for i in range(size)]         # inside host i
        self.outside = [f"sy{pid}x{k}h{i}" for i in range(size)]         # its peer, on the bridge
        self.hostnames = [f"node{i}" for i in range(size)]
        if max(len(n) for n in (self.bridge, *self.outside, *self.interfaces)) > 15:   # Linux's limit
            raise ValueError(f"too many hosts for interface names: {size}")
        self.python = str(Path(sys.executable).parent / "python")       # the venv's, not what it links to
        self.bin = str(Path(sys.executable).parent)
        self._made: list[tuple[str, str]] = []   # ("link" | "netns", name), deleted in reverse order
        self._holders: list[subprocess.Popen | None] = [None] * size
        self._holder_pids: list[int | None] = [None] * size
        self._pidns: list[str | None] = [None] * size
        self._nodes: list[subprocess.Popen | None] = [None] * size
        self._closed = False

    # -- setup -------------------------------------------------------------------------------------

    def __enter__(self) -> NetnsCluster:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def ray_address(self) -> str:
        return f"{self.addresses[0]}:{RAY_PORT}"

    def host_dir(self, i: int) -> Path:
        """Host i's own files as seen from here: its /tmp is host_dir(i) / "tmp"."""
        return self.base / f"host{i}"

    def on_host(self, i: int, path: str | Path) -> Path:
        """Where a path under host i's /tmp is, seen from here."""
        path = Path(path)
        if path.parts[:2] != ("/", "tmp"):
            raise ValueError(f"{path} is not under a host's /tmp")
        return self.host_dir(i) / "tmp" / path.relative_to("/tmp")

    def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        try:
            self._link("add", self.bridge, "type", "bridge")
        except RuntimeError as error:
            raise Unavailable(f"cannot make a bridge here: {error}") from None
        # Traffic between the hosts crosses the bridge: keep it out of iptables (a FORWARD DROP policy,
        # such as Docker's, would drop it) for this bridge only; older kernels lack the option.
        _ip("link", "set", self.bridge, "type", "bridge", "nf_call_iptables", "0", "nf_call_ip6tables", "0",
            "nf_call_arptables", "0", check=False)
        _ip("addr", "add", f"{self.bridge_address}/{self.net.prefixlen}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i in range(self.size):
            self._make_host(i)
        for i in range(self.size):
            self._start_holder(i)
        if self.with_ray:
            self.start_node(0)
            self._wait_for_port(0, RAY_PORT, 60)
            for i in range(1, self.size):
                self.start_node(i)
            self.wait_for_nodes(self.size)

    def _link(self, *args: str) -> None:
        _ip("link", *args)
        self._made.append(("link", args[1]))

    def _make_host(self, i: int) -> None:
        ns, inside, outside = self.namespaces[i], self.interfaces[i], self.outside[i]
        try:
            _ip("netns", "add", ns)
        except RuntimeError as error:
            raise Unavailable(f"cannot make network namespaces here: {error}") from None
        self._made.append(("netns", ns))
        # The peer is made in the namespace itself, so its name never exists out here.
        self._link("add", outside, "type", "veth", "peer", "name", inside, "netns", ns)
        _ip("link", "set", outside, "master", self.bridge)
        _ip("link", "set", outside, "up")
        _ip("-n", ns, "addr", "add", f"{self.addresses[i]}/{self.net.prefixlen}", "dev", inside)
        _ip("-n", ns, "link", "set", inside, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        home = self.host_dir(i)
        (home / "tmp").mkdir(parents=True)
        (home / "tmp").chmod(0o1777)
        names = "".join(f"{a} {n}\n" for a, n in zip(self.addresses, self.hostnames, strict=True))
        (home / "hosts").write_text(f"127.0.0.1 localhost\n::1 localhost ip6-localhost\n{names}")

    def _start_holder(self, i: int) -> None:
        log = self.host_dir(i) / "holder.log"
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), MARK: self.name,
               "SY_HOSTS": str(self.host_dir(i) / "hosts"), "SY_TMP": str(self.host_dir(i) / "tmp"),
               "SY_NAME": self.hostnames[i], "SY_PYTHON": self.python, "SY_HOLDER": HOLDER,
               "SY_KEEP": " ".join(_kept_under_tmp())}
        with open(log, "wb") as out:
            self._holders[i] = subprocess.Popen(
                ["ip", "netns", "exec", self.namespaces[i], "unshare", "--mount", "--uts", "--pid", "--fork",
                 "--mount-proc", "--propagation", "private", "--", "sh", "-c", SETUP],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + 30
        while "holder up" not in log.read_text():
            if self._holders[i].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"host {i} did not come up: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        (child,) = psutil.Process(self._holders[i].pid).children()   # unshare's: PID 1 on the host
        self._holder_pids[i] = child.pid
        self._pidns[i] = os.readlink(f"/proc/{child.pid}/ns/pid")

    def env(self, i: int, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment a command on host i starts with: nothing of this process's but its Python."""
        env = {"PATH": f"{self.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOME": "/tmp/home", "LANG": "C.UTF-8", "RAY_USAGE_STATS_ENABLED": "0", MARK: self.name}
        if "PYTHONPATH" in os.environ:   # the same Python as here: what it imports, the hosts import
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        return {**env, **(extra or {})}

    def _enter(self, i: int) -> list[str]:
        return ["nsenter", "--target", str(self._holder_pids[i]), "--mount", "--uts", "--net", "--pid",
                "--root", "--wd", "--"]

    def popen(self, i: int, argv: list[str], env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
        """Start argv on host i (its own process group here)."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen([*self._enter(i), *argv], env=self.env(i, env), start_new_session=True,
                                **kwargs)

    def run(self, i: int, argv: list[str], env: dict[str, str] | None = None, timeout: float = 300,
            **kwargs) -> subprocess.CompletedProcess:
        """Run argv on host i to its end; output captured (text) unless told otherwise."""
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("text", True)
        process = self.popen(i, argv, env, **kwargs)
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            raise subprocess.TimeoutExpired(argv, timeout, out, err) from None
        return subprocess.CompletedProcess(argv, process.returncode, out, err)

    # -- Ray ---------------------------------------------------------------------------------------

    def start_node(self, i: int) -> None:
        """`ray start` on host i, as users start it (--block: it stays in the foreground, logging to
        host_dir(i)/ray.log)."""
        common = ["--node-ip-address", self.addresses[i], "--disable-usage-stats", "--block",
                  f"--object-store-memory={OBJECT_STORE_BYTES}"]
        if i == 0:
            argv = ["ray", "start", "--head", "--port", str(RAY_PORT), f"--num-cpus={self.head_cpus}",
                    "--include-dashboard=false", *common]
        else:
            argv = ["ray", "start", "--address", self.ray_address, f"--num-cpus={self.worker_cpus}", *common]
        # Ray gives a node 30 s to register; eight starting at once on a loaded machine (the suite runs on
        # two workers) took longer, and `ray start` then gives up.
        env = {"RAY_raylet_start_wait_time_s": "120", **self.ray_env}
        with open(self.host_dir(i) / "ray.log", "ab") as out:
            self._nodes[i] = self.popen(i, argv, env, stdout=out, stderr=subprocess.STDOUT)

    def _wait_for_port(self, i: int, port: int, timeout: float) -> None:
        import socket

        deadline = time.monotonic() + timeout
        while True:
            self._node_alive(i)
            with socket.socket() as s:
                s.settimeout(1)
                if s.connect_ex((self.addresses[i], port)) == 0:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"host {i}'s Ray node is not listening on {port}: {self.ray_log(i)}")
            time.sleep(0.1)

    def _node_alive(self, i: int) -> None:
        node = self._nodes[i]
        if node is not None and node.poll() is not None:
            raise RuntimeError(f"host {i}'s `ray start` exited ({node.returncode}): {self.ray_log(i)}")

    def ray_log(self, i: int, tail: int = 3000) -> str:
        path = self.host_dir(i) / "ray.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def alive_nodes(self) -> dict[str, str]:
        """{node id: address} of the nodes the head's GCS has alive (asked from here, over the bridge)."""
        from ray._raylet import GcsClient

        infos = GcsClient(address=self.ray_address).get_all_node_info(timeout=10)
        return {node_id.hex(): info.node_manager_address for node_id, info in infos.items() if info.state == 0}

    def wait_for_nodes(self, count: int, timeout: float = 180) -> None:   # `ray start` is slow under load
        deadline = time.monotonic() + timeout
        while True:
            for i in range(self.size):
                self._node_alive(i)
            try:
                if len(self.alive_nodes()) == count:
                    return
            except Exception:   # the GCS still starting
                pass
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- host {i}:\n{self.ray_log(i)}" for i in range(self.size))
                raise RuntimeError(f"{count} Ray nodes never came up\n{logs}")
            time.sleep(0.25)

    # -- faults ------------------------------------------------------------------------------------

    def cut(self, i: int) -> None:
        """Host i loses its network (its bridge port goes down; it keeps its address)."""
        _ip("link", "set", self.outside[i], "down")

    def heal(self, i: int) -> None:
        """Host i's link comes back. What the hosts learnt of each other's hardware addresses while it was
        down (failed lookups) is forgotten, so the first packet across finds its way rather than an error."""
        _ip("link", "set", self.outside[i], "up")
        _ip("-n", self.namespaces[i], "neigh", "flush", "dev", self.interfaces[i], check=False)
        _ip("neigh", "flush", "to", self.addresses[i], "dev", self.bridge, check=False)
        for j, ns in enumerate(self.namespaces):
            if j != i:
                _ip("-n", ns, "neigh", "flush", "to", self.addresses[i], check=False)

    def processes(self, i: int) -> list:
        """Every process of host i but its holder: those in its PID namespace and their descendants (the
        sandboxes nested in it have PID namespaces of their own)."""
        found: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter():
            with contextlib.suppress(OSError, psutil.Error):
                if proc.pid != self._holder_pids[i] and os.readlink(f"/proc/{proc.pid}/ns/pid") == self._pidns[i]:
                    found[proc.pid] = proc
                    for child in proc.children(recursive=True):
                        found[child.pid] = child
        return list(found.values())

    def kill_node(self, i: int) -> None:
        """Host i crashes: every process on it is killed at once (its holder and network stay)."""
        victims = self.processes(i)
        for proc in victims:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(victims, timeout=10)
        if self._nodes[i] is not None:
            self._nodes[i].wait(10)
            self._nodes[i] = None

    def restart_head(self) -> None:
        """The head's Ray is restarted as users restart it (`ray stop --force`, then `ray start --head`); what
        else runs on host 0 runs on. Without GCS fault tolerance the new head is a new cluster: the workers'
        raylets give up on the old one (in about a minute) and must be started again to join it."""
        stopped = self.run(0, ["ray", "stop", "--force"], self.ray_env, timeout=60)
        if stopped.returncode != 0:
            raise RuntimeError(f"`ray stop --force` on the head failed: {stopped.stderr[-2000:]}")
        if self._nodes[0] is not None:
            self._nodes[0].wait(30)
            self._nodes[0] = None
        self.start_node(0)
        self._wait_for_port(0, RAY_PORT, 60)

    # -- teardown ----------------------------------------------------------------------------------

    def leftovers(self) -> list[str]:
        """Processes of the cluster still on this machine: in one of its PID namespaces, or with its mark."""
        ours = {ns for ns in self._pidns if ns}
        found = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            with contextlib.suppress(OSError, psutil.Error):
                if proc.pid == os.getpid():
                    continue
                if os.readlink(f"/proc/{proc.pid}/ns/pid") in ours or proc.environ().get(MARK) == self.name:
                    found.append(f"{proc.pid}: {' '.join(proc.info['cmdline'] or [])[:200]}")
        return found

    def close(self) -> None:
        """Kill every host (all its processes go with its holder), then delete what was made."""
        if self._closed:
            return
        self._closed = True
        for pid in self._holder_pids:
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for process in [*self._holders, *self._nodes]:
            if process is None:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
        deadline = time.monotonic() + 15
        while (left := self.leftovers()) and time.monotonic() < deadline:
            time.sleep(0.2)
        errors = []
        for kind, name in reversed(self._made):
            done = _ip("link", "delete", name, check=False) if kind == "link" else \
                _ip("netns", "delete", name, check=False)
            if done.returncode != 0 and "Cannot find device" not in done.stderr:
                errors.append(f"ip {kind} delete {name}: {done.stderr.strip()}")
        self._made.clear()
        # Files Ray and the jobs wrote as root on the hosts; the test's tmp directory would keep them.
        shutil.rmtree(self.base, ignore_errors=True)
        if left:
            errors.append("processes left behind:\n" + "\n".join(left))
        if errors:
            raise RuntimeError("the cluster was not torn down cleanly: " + "; ".join(errors))
