"""FastFile mode: /opt/ml/input/data/<channel> as a read-only view of the channel's objects, whose bytes are
fetched on first read, so the script starts before any object body is downloaded. Two things serve it:

- the kernel's lazy files (runtime/lazyfiles.py), where the agent may make a fanotify group (root) and its
  disk takes pre-content events (Linux 6.14+ on ext4, xfs, btrfs): real files on the instance's disk, read
  at local speed once fetched;
- rclone's VFS mount (`rclone mount`, Debian's package) everywhere else, chosen over s3fs-fuse and fsspec's
  FUSE by measurement (docs/input-modes.md, benchmarks/fastfile_mounts.py): it reads ahead, keeps what it
  read in a bounded cache on the instance's disk, and lists lazily.

Either lives in the instance's own mount namespace (its sandbox's, or the agent's own when there is no
sandbox), so it is gone with the instance's last process, also when the agent is killed; rclone itself
gets SIGKILL when the process that started it dies. `seal()` needs CAP_SYS_ADMIN and makes no thread: a
warm instance's job calls it before it drops its capabilities (and before its zygote forks), and mounts its
rclone channels then too."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from shipyard.errors import ShipyardError

RCLONE = "rclone"
REMOTE = "shipyard"   # the rclone remote, defined by RCLONE_CONFIG_SHIPYARD_* variables (no config file)
# The local cache's bound per channel (SHIPYARD_FASTFILE_CACHE_MB overrides it): beyond it rclone evicts what
# no reader has open, and lazy files replace their oldest complete file.
CACHE_MB = 10 * 1024
# How long the mount may take to appear before the job fails.
MOUNT_SECONDS = 60.0
# Read-ahead and the dir cache, measured in benchmarks/fastfile_mounts.py; objects do not change while a job
# reads them, so listings and attributes are cached for the whole job.
FLAGS = ("--read-only", "--config", "/dev/null", "--vfs-cache-mode", "full", "--dir-cache-time", "1000h",
         "--attr-timeout", "1000h", "--no-modtime", "--vfs-read-ahead", "256M", "--buffer-size", "32M",
         "--vfs-cache-poll-interval", "10s", "--transfers", "8", "--low-level-retries", "10")


INSTALL = "install it with `make setup` or `apt-get install rclone fuse3`"


class MountError(ShipyardError):
    """A FastFile channel could not be mounted."""


@dataclass(frozen=True)
class MountPlan:
    """What mounting one channel runs: argv, the environment it adds, and the keys it shows (None: all)."""

    channel: str
    argv: tuple[str, ...]
    env: dict[str, str]
    mountpoint: Path
    files_from: Path | None = None
    keys: tuple[str, ...] | None = field(default=None, repr=False)


def remote(uri: str) -> tuple[str, dict[str, str]]:
    """rclone's name for `uri` and the environment that defines it: an S3 remote for s3://, the path
    itself for a local URI."""
    from shipyard.storage import uri as uris

    if uris.is_local(uri):
        return uris.filesystem(uri)[1], {}
    bucket_and_key = uri.split("://", 1)[1]
    prefix = f"RCLONE_CONFIG_{REMOTE.upper()}_"
    endpoint = uris.s3_endpoint()
    # NO_HEAD_OBJECT: a GET, not a HEAD then a GET, per object opened (the listing has its size).
    env = {f"{prefix}TYPE": "s3", f"{prefix}PROVIDER": "Other" if endpoint else "AWS", f"{prefix}ENV_AUTH": "true",
           f"{prefix}NO_HEAD_OBJECT": "true",
           f"{prefix}REGION": os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"}
    if endpoint:
        env[f"{prefix}ENDPOINT"] = endpoint
    return f"{REMOTE}:{bucket_and_key}", env


def plan(channel, mountpoint: Path, cache_dir: Path, keys: list[str] | None = None) -> MountPlan:
    """The rclone command that mounts `channel` (a runtime.config.ChannelSource) at mountpoint; with
    `keys`, only those (this host's shard) are shown."""
    source, env = remote(channel.uri)
    argv = [RCLONE, "mount", source, str(mountpoint), *FLAGS, "--cache-dir", str(cache_dir),
            "--vfs-cache-max-size", f"{_cache_mb()}M"]
    files_from = None
    if keys is not None:
        files_from = cache_dir.parent / f"{channel.name}.keys"
        argv += ["--files-from-raw", str(files_from)]
    bundle = os.environ.get("AWS_CA_BUNDLE")
    if bundle and not channel.uri.startswith(("file:", "local:", "/")):
        argv += ["--ca-cert", bundle]   # rclone 1.60 fails on AWS_CA_BUNDLE itself; the flag does the same
    return MountPlan(channel.name, tuple(argv), env, mountpoint, files_from, tuple(keys) if keys is not None else None)


def _cache_mb() -> int:
    return int(os.environ.get("SHIPYARD_FASTFILE_CACHE_MB") or CACHE_MB)


def list_keys(channel) -> list[str]:
    """Every object under the channel's URI, relative, as rclone sees them (a separate process: no
    storage client, and no thread, in the agent before its zygote forks)."""
    source, env = remote(channel.uri)
    done = subprocess.run([RCLONE, "lsf", "-R", "--files-only", "--config", "/dev/null", source],
                          env=_environment(env), capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise MountError(f"channel {channel.name}: cannot list {channel.uri}: {done.stderr.strip()[-500:]}")
    return sorted(done.stdout.splitlines())


def _environment(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    return {**env, **extra}


def _mounted(mountpoint: Path) -> bool:
    target = str(mountpoint).replace(" ", "\\040")
    with open("/proc/self/mountinfo") as info:
        return any(line.split()[4] == target for line in info)


class Mount:
    """A running rclone mount."""

    kind = "rclone"

    def __init__(self, plan: MountPlan, log_fd: int) -> None:
        self.plan = plan
        plan.mountpoint.mkdir(parents=True, exist_ok=True)
        if plan.files_from is not None:
            plan.files_from.write_text("".join(f"{key}\n" for key in plan.keys or ()))
        try:
            self.process = subprocess.Popen(plan.argv, env=_environment(plan.env), stdin=subprocess.DEVNULL,
                                            stdout=log_fd, stderr=log_fd, preexec_fn=_die_with_parent)
        except FileNotFoundError:
            raise MountError(f"channel {plan.channel}: FastFile needs rclone on every instance; {INSTALL}") from None
        deadline = time.monotonic() + MOUNT_SECONDS
        while not _mounted(plan.mountpoint):
            if self.process.poll() is not None:
                raise MountError(f"channel {plan.channel}: rclone mount exited with {self.process.returncode} "
                                 "(its message is in the log above)")
            if time.monotonic() > deadline:
                self.stop()
                raise MountError(f"channel {plan.channel}: not mounted after {MOUNT_SECONDS:.0f}s")
            time.sleep(0.01)

    @property
    def channel(self) -> str:
        return self.plan.channel

    def stop(self) -> None:
        """Unmount (rclone does on SIGTERM) and end rclone; a mount left busy is detached."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if _mounted(self.plan.mountpoint):
            subprocess.run(["fusermount3", "-uz", str(self.plan.mountpoint)], capture_output=True)


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG


# {channel: (fanotify group, O_PATH descriptors of the directory beneath its view and of its scratch directory)}
Sealed = dict[str, tuple[int, int, int]]


def seal(config) -> Sealed:
    """The FastFile channels of `config` (an AgentConfig) that lazy files serve here, each directory bound
    read-only over itself already; {} when none can be (SHIPYARD_FASTFILE=rclone, no CAP_SYS_ADMIN, an old
    kernel, a file system without pre-content events). Needs CAP_SYS_ADMIN; makes no thread."""
    from shipyard import settings
    from shipyard.contract.layout import Layout
    from shipyard.runtime import lazyfiles

    names = [c.name for c in config.channels if c.input_mode == "FastFile"]
    if not names or settings.fastfile_mount() == "rclone":
        return {}
    layout = Layout(Path(config.base))
    directories = {name: layout.channel_dir(name) for name in names}
    for directory in directories.values():
        directory.mkdir(parents=True, exist_ok=True)
    sealed: Sealed = {}
    with contextlib.ExitStack() as undo:
        try:
            for name, directory in directories.items():
                # scratch beside input/data, on the channel's mount: where evicted files' successors are made
                sealed[name] = lazyfiles.make_view(directory, layout.input_data_dir.parent / ".lazy" / name)
                undo.callback(lazyfiles.unmake_view, directory, *sealed[name])
        except OSError:   # no group, mount or pre-content events here: rclone's turn (it says what it needs)
            return {}
        undo.pop_all()
    return sealed


class LazyMount:
    """A FastFile channel served as lazy files (runtime/lazyfiles.py)."""

    kind = "lazy files"

    def __init__(self, channel, group: int, beneath: int, scratch: int, share, on_error) -> None:
        from shipyard.runtime import lazyfiles
        from shipyard.storage import transfer
        from shipyard.storage.uri import reader

        self.channel = channel.name
        fs, root, single, pages = transfer.paged_listing(channel.uri, reader)
        if single:   # the URI names one object: its folder is the prefix
            root = root.rsplit("/", 1)[0]
        if channel.distribution == "ShardedByS3Key":   # this host's share needs every key
            objects = {key: value for page in pages for key, value in page.items()}
            pages = iter([{key: objects[key] for key in share(list(objects))}])
        self.served = lazyfiles.LazyChannel(group, channel.name, beneath, scratch, fs, root, pages,
                                            cache_bytes=_cache_mb() << 20, on_error=on_error)

    def stop(self) -> None:
        self.served.stop()


def mount_channels(config, log_fd: int, sealed: Sealed | None = None, *, lazy: bool | None = None,
                   on_error=None) -> list:
    """Mount every FastFile channel of `config` (an AgentConfig) at its /opt/ml/input/data/<channel>, this
    host's shard only under ShardedByS3Key: as lazy files those `sealed` names, with rclone the others
    (`lazy`: only the one kind). A mount that fails unmounts those made before it. `on_error(message)`:
    a lazy channel's object could not be read."""
    from shipyard.contract.layout import Layout
    from shipyard.runtime.pipe import epoch_items

    sealed = sealed or {}
    layout, mounts = Layout(Path(config.base)), []
    try:
        for channel in config.channels:
            if channel.input_mode != "FastFile" or lazy is not None and lazy != (channel.name in sealed):
                continue

            def share(keys: list[str], channel=channel) -> list[str] | None:
                """This host's keys: under ShardedByS3Key those File mode would copy (and Pipe mode's
                first epoch deal) here; None: all."""
                if channel.distribution != "ShardedByS3Key":
                    return None
                return epoch_items(keys, 0, channel.shuffle_seed, *config.share(channel), sharded=True)

            if channel.name in sealed:
                mounts.append(LazyMount(channel, *sealed[channel.name], share, on_error or (lambda message: None)))
                continue
            keys = share(list_keys(channel))
            cache = Path(config.instance_dir) / "fastfile" / channel.name
            cache.mkdir(parents=True, exist_ok=True)
            mounts.append(Mount(plan(channel, layout.channel_dir(channel.name), cache, keys), log_fd))
    except BaseException:
        for mount in mounts:
            mount.stop()
        raise
    return mounts

