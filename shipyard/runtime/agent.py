"""The instance agent: `python -m shipyard.runtime.agent AGENT_JSON`, started once per instance (inside
its sandbox when there is one). It does what the SageMaker training toolkit does in a container, plus
the platform's per-instance work that must happen where the instance runs (downloading its channels):

    Downloading: code (sagemaker_submit_directory) into /opt/ml/code, channels into input/data
    installing:  requirements.txt / setup.py into this job's own site-packages
    Training:    the launcher's command, every process's stdout and stderr appended to the host log
    outcome:     output/success, or output/failure in the toolkit's format; the exit code

Every line the processes print goes straight to the host's log file (an inherited O_APPEND descriptor),
so nothing printed is lost whichever process crashes, this agent included."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from shipyard.contract.config import write_configs
from shipyard.contract.environment import TrainingEnvironment
from shipyard.contract.layout import Layout
from shipyard.errors import ShipyardError
from shipyard.registry import Registry
from shipyard.runtime import launchers, zygote
from shipyard.runtime.config import AgentConfig
from shipyard.runtime.control import CONTROL_FILE, CONTROL_POLL_SECONDS, ControlChannel
from shipyard.runtime.events import EventWriter
from shipyard.runtime.failure import error_excerpt, failure_message

# Left over from a parent launched under torchrun they would join the wrong process group.
_INHERITED_DIST_VARS = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
)


# What libraries of the training processes would otherwise print into the user's log: kineto's (torch.profiler's)
# USDT/STAGE lines at every profiler start and stop (shipyard's detailed profiling starts one per range).
# Its chatter ranks above its errors, so no lower level keeps those; the job's environment can set it back.
QUIET_LIBRARIES = {"KINETO_LOG_LEVEL": "6"}
# Optimizer steps after which an unread restored checkpoint is reported.
RESUME_CHECK_STEPS = 3
# The final checkpoint upload's limit; an interruption's SIGKILL may come sooner.
FLUSH_SECONDS = 300.0
# Services an instance runs beside the script when the job asks for them (the AgentConfig field that holds
# their settings -> their module): each module's start(settings, agent_config, input_config_dir) returns what
# finish(timeout) ends once the script has (True: every file it wrote reached the job's URI), and its
# script_environment(settings, base) is what the training processes need.
SERVICES = Registry("agent_services", "agent service", {
    "profiler": "shipyard.runtime.profiler.agent", "debugger": "shipyard.runtime.debugger.agent",
    "tensorboard": "shipyard.runtime.tensorboard"})
# How often the sidecars are looked at while the entry point runs.
SIDECAR_POLL_SECONDS = 0.5
# After the entry point succeeded, how long a sidecar may take to finish its work after SIGTERM (a
# non-leader's parameter server waits for the master's script) before it is killed.
SIDECAR_STOP_SECONDS = 300.0
# A follower instance starts its launcher once the leader's rendezvous port listens, looking this often,
# for at most this long.
LEADER_POLL_SECONDS = 0.01
LEADER_WAIT_SECONDS = 600.0
# When a sidecar died, how long the entry point gets after SIGTERM before it is killed.
SCRIPT_STOP_SECONDS = 10.0


class TransferProgress:
    """A transfer's progress (storage.transfer's `progress`) as the host log shows it, every PROGRESS_SECONDS
    and once done (`download train: 120.0 of 300.0 MB (40%), 48.1 MB/s, 0:00:04 left`); the controller gets
    the same as `progress` events, and one at its start. `what`: download or restore; `name`: the channel's,
    or code, or checkpoints (the event's `channel`)."""

    def __init__(self, agent: Agent, what: str, name: str) -> None:
        self.agent, self.what, self.name = agent, what, name
        self.started = time.monotonic()
        self.last: float | None = None

    def __call__(self, done: int, total: int) -> None:
        from shipyard.storage.transfer import PROGRESS_SECONDS, progress_line

        now = time.monotonic()
        if total == 0 or self.last is not None and now - self.last < PROGRESS_SECONDS and done != total:
            return   # nothing to fetch (all linked from an earlier attempt), or said a moment ago
        self.last = now
        self.agent.events.emit("progress", what=self.what, channel=self.name, done=done, total=total)
        if done:   # the start is an event only: when it began, for the rate a follower works out
            self.agent.say(progress_line(f"{self.what} {self.name}", done, total, now - self.started))


class StopRequested(Exception):
    pass


class InstallError(ShipyardError):
    pass


class SidecarExited(ShipyardError):
    """A launcher's side process ended while the entry point ran (the script would wait for it forever)."""


class ChannelFailed(ShipyardError):
    """A Pipe channel stopped short of its epoch's end (the script saw an early end of file)."""


class Agent:
    def __init__(self, config: AgentConfig, mounts: list | Exception | None = None,
                 sealed: dict | None = None) -> None:
        self.config = config
        # FastFile channels' rclone mounts: a warm instance's are made before it starts (or why they could not
        # be), with its channels that lazy files serve (fastfile.seal); None: not yet.
        self.mounts = mounts
        self.sealed = sealed
        self.lazy: Future | None = None   # the lazy files being made
        self.streams: list = []      # Pipe channels' streams
        self.channel_error: str | None = None
        self.layout = Layout(Path(config.base))
        self.events = EventWriter(Path(config.events_path), config.host)
        self.log_fd = os.open(config.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.child: subprocess.Popen | None = None
        self.stopping = False
        self.control = ControlChannel(Path(config.instance_dir) / CONTROL_FILE)
        self.pausing = False
        self.services: list = []   # (name, running) of SERVICES started, finished at the end
        self.services_finished = False
        # The profiling the training processes started with (None until they start).
        self.launched_profiler: dict | None = None
        self.updating = threading.Lock()   # services, config and launched_profiler, also the control thread's
        self.restored: str | None = None     # the checkpoint restored, when there was one
        self.read_mark = Path(config.instance_dir) / "checkpoint-read"
        self.resume_warned = False

    # -- output -----------------------------------------------------------------------------
    def say(self, message: str) -> None:
        now = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
        os.write(self.log_fd, f"{stamp} shipyard-agent INFO {message}\n".encode())

    def _on_sigterm(self, signum, frame) -> None:
        self.stopping = True
        if self.child and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)
            self.say(f"notice (SIGTERM) passed to the entry point, pid {self.child.pid}")
        else:
            self.say("notice (SIGTERM) with no entry point running")

    def _check_stop(self) -> None:
        if self.stopping:
            raise StopRequested()

    # -- steps ------------------------------------------------------------------------------
    def fetch_code(self, env: TrainingEnvironment) -> None:
        from shipyard.storage import archive
        from shipyard.storage.uri import is_local, local_path

        code_dir = self.layout.code_dir
        if self.config.algorithm:   # a built-in algorithm's image brings its program
            return
        # As the toolkit does: code already in place (baked in, or a restart) is not fetched again.
        if code_dir.exists() and any(code_dir.iterdir()):
            return
        code_dir.mkdir(parents=True, exist_ok=True)
        uri = env.module_dir
        archived = uri.endswith((".tar.gz", ".tgz"))
        if archived and is_local(uri):   # extracted where it is: no copy, and no fsspec import (0.03 s cold)
            count = archive.safe_extract(Path(local_path(uri)), code_dir)
            self.say(f"code: {count} files extracted from {uri}")
            return
        from shipyard.storage import transfer

        progress = TransferProgress(self, "download", "code")
        if not archived:
            transfer.download(uri, code_dir, progress=progress)
            return
        staging = Path(self.config.instance_dir) / "code-download"
        transfer.download(uri, staging, progress=progress)
        archive.safe_extract(staging / Path(uri).name, code_dir)

    def download_channels(self) -> None:
        """File mode: each channel into input/data/<channel>, this host's share for ShardedByS3Key. What an
        earlier attempt of this host downloaded and what has not changed since is linked from it, not
        fetched again (each copy's objects are listed, as they complete, in downloads/<channel>.jsonl)."""
        import json

        from shipyard.storage import transfer

        for channel in self.config.channels:
            if channel.input_mode != "File" or channel.file_system_type:
                continue
            self._check_stop()
            uri, keys, listed = self._objects(channel)
            dest = self.layout.channel_dir(channel.name)
            dest.mkdir(parents=True, exist_ok=True)
            manifest = Path(self.config.instance_dir) / "downloads" / f"{channel.name}.jsonl"
            manifest.parent.mkdir(parents=True, exist_ok=True)
            lock, linked = threading.Lock(), []

            def record(key: str, size: int, identity: str, was_linked: bool, manifest: Path = manifest,
                       lock=lock, linked=linked) -> None:
                with lock, open(manifest, "a") as out:
                    out.write(json.dumps({"key": key, "size": size, "id": identity}) + "\n")
                    if was_linked:
                        linked.append(key)

            started = time.monotonic()
            size = transfer.download(uri, dest, keys, progress=TransferProgress(self, "download", channel.name),
                                     record=record, reuse=self._earlier_copies(channel.name), listed=listed)
            reused = f"; {len(linked)} unchanged since an earlier attempt, linked from it" if linked else ""
            self.say(f"channel {channel.name}: {len(keys)} objects, {size} bytes fetched from {channel.uri} "
                     f"({channel.distribution}) in {time.monotonic() - started:.2f}s{reused}")

    def _objects(self, channel) -> tuple[str, list[str], object]:
        """(base URI, this host's keys under it, its listing): the prefix's objects, or the manifest's."""
        from shipyard.runtime.pipe import epoch_items
        from shipyard.storage import manifest, transfer
        from shipyard.storage.uri import reader

        if channel.s3_data_type == "ManifestFile":
            uri, keys = manifest.read_manifest(channel.uri)
            listed = transfer.listing(uri, reader)
        else:
            uri, listed = channel.uri, transfer.listing(channel.uri, reader)
            keys = list(listed[3])
        return uri, epoch_items(keys, 0, channel.shuffle_seed, *self.config.share(channel),
                                sharded=channel.distribution == "ShardedByS3Key"), listed

    def open_channels(self) -> None:
        """FastFile channels mounted (unless a warm instance mounted them already) and their lazy files made,
        file systems shown (the sandbox binds them; without one, a link). Pipe channels started streaming
        earlier."""
        if isinstance(self.mounts, Exception):
            error, self.mounts = self.mounts, []
            raise error
        if self.mounts is None and self._in_mode("FastFile"):
            from shipyard.runtime import fastfile

            self.mounts = fastfile.mount_channels(self.config, self.log_fd, self.sealed, lazy=False)
        for channel in self.config.channels:
            if channel.file_system_type and not self.config.sandboxed:
                link = self.layout.channel_dir(channel.name)
                link.rmdir()
                link.symlink_to(channel.uri, target_is_directory=True)
        for mount in [*(self.mounts or []), *(self.lazy.result() if self.lazy else [])]:
            self.say(f"channel {mount.channel}: mounted (FastFile, {mount.kind})")

    def _in_mode(self, mode: str) -> list:
        """This instance's channels in input mode `mode` (a mode's modules are imported only when some are)."""
        return [c for c in self.config.channels if c.input_mode == mode]

    def _start_lazy_files(self) -> None:
        """Lazy files list their channels and make their files while the code comes (a cold instance makes
        their groups and views here, a warm one's job made them before it dropped its capabilities)."""
        if not self._in_mode("FastFile"):
            return
        from shipyard.runtime import fastfile

        if self.sealed is None:
            self.sealed = fastfile.seal(self.config)
        if self.sealed:
            self.lazy = ThreadPoolExecutor(1, thread_name_prefix="lazy-files").submit(
                fastfile.mount_channels, self.config, self.log_fd, self.sealed, lazy=True,
                on_error=self._channel_failed)

    def _lazy_groups(self) -> tuple[int, ...]:
        """The lazy channels' fanotify groups, for the entry point to hold too. Were this agent killed, the
        kernel would answer a read still waiting for its bytes as its group went: the hole's zeros, for the
        moment before the sandbox's processes are killed. Held by the entry point, the group outlives the
        agent, and such a read waits until they are."""
        return tuple(group for group, _, _ in (self.sealed or {}).values())

    def _start_streams(self) -> None:
        channels = self._in_mode("Pipe")
        if channels:   # imported only then: 0.012 s of every other cold start
            from shipyard.runtime import pipe

            self.streams = [pipe.start(c, self.layout.input_data_dir, *self.config.share(c), self._channel_failed)
                            for c in channels]

    def _restart_streams(self) -> None:
        """The script starts over when this instance rejoins: so do its Pipe channels, at epoch 0, with the
        readers' epoch counters (pipe_reader's state files) gone too."""
        import shutil

        if self.streams:
            for stream in self.streams:
                stream.stop()
            shutil.rmtree(Path(self.config.base) / "pipe_state", ignore_errors=True)
            self._start_streams()

    def _channel_failed(self, message: str) -> None:
        """A Pipe channel could not go on: the script must not take what it read for the whole epoch."""
        self.channel_error = message   # said by _fail once the script is stopped
        if self.child and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def close_channels(self) -> None:
        for stream in self.streams:
            stream.stop()
        lazy = [] if self.lazy is None or self.lazy.exception() else self.lazy.result()
        for mount in [*(self.mounts or []), *lazy]:
            mount.stop()

    def _earlier_copies(self, channel: str) -> list[tuple[Path, dict]]:
        """This host's earlier attempts' copies of `channel`: (its directory, {key: [size, identity]})."""
        import json

        here = Path(self.config.instance_dir)
        copies = []
        for instance in sorted(here.parent.glob(f"{self.config.host}*")):
            if instance == here or instance.name != self.config.host and not \
                    instance.name.removeprefix(self.config.host + "-").isdigit():
                continue
            listed = instance / "downloads" / f"{channel}.jsonl"
            if not listed.is_file():
                continue
            entries = {}
            for line in listed.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:   # a line cut short when that attempt was killed
                    continue
                entries[entry["key"]] = [entry["size"], entry["id"]]
            copies.append((instance / "ml" / "input" / "data" / channel, entries))
        return copies

    def start_checkpoints(self):
        """Restore checkpoints before the entry point starts (every start and restart) and keep
        syncing them while it runs."""
        if not self.config.checkpoint_uri:
            return None
        from shipyard.runtime.checkpoints import CheckpointSync

        sync = CheckpointSync(self.config.checkpoint_dir, self.config.checkpoint_uri,
                              on_event=lambda kind, fields: self.events.emit(kind, **fields))
        report = sync.restore(progress=TransferProgress(self, "restore", "checkpoints"))
        if report.files:
            self.restored = report.checkpoint or f"{report.files} files"
        self.events.emit("checkpoint_restored", checkpoint=report.checkpoint, files=report.files,
                         skipped=list(report.skipped_incomplete))
        self.say(f"checkpoints: restored {report.files} files ({report.bytes} bytes) from "
                 f"{self.config.checkpoint_uri}; newest complete checkpoint {report.checkpoint!r}"
                 + (f"; skipped incomplete {', '.join(report.skipped_incomplete)}" if report.skipped_incomplete else ""))
        sync.start()
        return sync

    def _final_sync(self, sync, what: str) -> bool:
        done = sync.finish(FLUSH_SECONDS)
        self.say(f"{what}: final sync " + ("complete" if done else "INCOMPLETE"))
        return done

    def finish_checkpoints(self, sync) -> None:
        if sync is not None:
            self.events.emit("checkpoint_flushed", complete=self._final_sync(sync, "checkpoints"))

    def start_services(self) -> None:
        """Start the services the job asks for (SERVICES) before the script, each added to `services` as
        (name, running) at once, so those started before one that fails are still finished."""
        for name in SERVICES:
            settings = getattr(self.config, name)
            if settings:
                self.services.append((name, SERVICES.load(name).start(
                    settings, self.config, self.layout.input_config_dir)))

    def finish_services(self) -> None:
        with self.updating:   # no profiling update starts a service once they are finished
            self.services_finished = True
        for name, running in self.services:
            self._final_sync(running, name)

    def install(self, python: str) -> None:
        code_dir = self.layout.code_dir
        target = self.config.site_packages
        commands = []
        if (code_dir / "setup.py").exists():
            commands.append([python, "-m", "pip", "install", "--no-build-isolation", "--target", str(target), "."])
        if (code_dir / "requirements.txt").exists():
            commands.append([python, "-m", "pip", "install", "--target", str(target), "-r", "requirements.txt"])
        for argv in commands:
            self._check_stop()
            self.say("installing: " + " ".join(argv[3:]))
            done = subprocess.run(argv, cwd=code_dir, stdout=self.log_fd, stderr=self.log_fd, stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                kind = "InstallModuleError" if "." in argv else "InstallRequirementsError"
                raise InstallError(f"{kind}:\nExitCode {done.returncode}\nCommand \"{' '.join(argv)}\"")

    def _check_preloaded(self) -> None:
        """A warm instance's zygote imported the framework already: a job that brings its own copy of one
        of those packages (requirements.txt, a module in its code) must not get the zygote's. Its Python
        processes are then executed, as on a cold instance."""
        if not os.environ.get(zygote.ENV_SOCKET):
            return
        shadowed = sorted(zygote.shadowed([self.config.site_packages, self.layout.code_dir]))
        if shadowed:
            del os.environ[zygote.ENV_SOCKET]
            self.say(f"the job brings its own {', '.join(shadowed)}: its processes start cold, not from "
                     "the warm instance's preloaded copy")

    def execute(self, argv: list[str], env: dict[str, str], sidecars: list = ()) -> int:
        self._check_stop()
        self.say("running: " + " ".join(argv))
        self.child = zygote.popen(   # forked from the warm instance's zygote when there is one
            argv, cwd=self.layout.code_dir, env=env, stdin=subprocess.DEVNULL,
            stdout=self.log_fd, stderr=self.log_fd, pass_fds=self._lazy_groups(),
        )
        if self.stopping:  # SIGTERM arrived between the check and the start
            self.child.send_signal(signal.SIGTERM)
        while True:
            try:
                return self.child.wait(timeout=SIDECAR_POLL_SECONDS if sidecars else None)
            except subprocess.TimeoutExpired:
                if not (self.stopping or self.pausing):  # then sidecars end on purpose
                    self._check_sidecars(sidecars, argv)

    # -- the whole run ------------------------------------------------------------------------
    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_sigterm)
        if not self.config.sandboxed and self._in_mode("FastFile"):
            from shipyard.runtime import namespace

            namespace.private_mounts()   # before any thread; the mounts then go with this instance
        self.layout.create(c.name for c in self.config.channels if c.input_mode != "Pipe")
        log_start = os.lseek(self.log_fd, 0, os.SEEK_END)
        argv: list[str] = []
        sync = None
        try:
            env = self.config.training_environment()
            checkpoints = {"LocalPath": self.config.checkpoint_local_path, "S3Uri": self.config.checkpoint_uri}
            write_configs(self.layout, self.config.hyperparameters, env.resource_config, env.input_data_config,
                          checkpoints if self.config.checkpoint_uri else None)
            self._start_streams()   # first: their storage client's import and listing overlap the rest
            self._start_lazy_files()
            self.events.emit("phase", phase="Downloading")
            self.fetch_code(env)
            self.download_channels()
            self.open_channels()
            sync = self.start_checkpoints()
            self.start_services()
            self.install(sys.executable)
            self._check_preloaded()
            launcher = launchers.for_instance(env, self.config.algorithm)
            threading.Thread(target=self._watch_control, name="shipyard-control", daemon=True).start()
            argv, code = self._launch(env, launcher)
            while self.pausing and not self.stopping:
                argv, code = self._rejoin(env, launcher, sync, code)
            if self.channel_error:
                raise ChannelFailed(self.channel_error)
        except StopRequested:
            self.finish_checkpoints(sync)
            self.finish_services()
            self.close_channels()
            self.say("stopped before the entry point started")
            self.events.emit("exit", code=143, stopped=True)
            return 143
        except (InstallError, SidecarExited, ChannelFailed) as exc:
            code = self._fail(str(exc))
        except ShipyardError as exc:
            code = self._fail(f"ClientError: {exc}")
        except Exception as exc:  # the toolkit reports its own errors as framework errors
            code = self._fail(f"Framework Error: {type(exc).__name__}: {exc}")
        else:
            if code == 0:
                self._check_resumed(finished=True)
                self.layout.success_file.touch()
            elif not self.stopping and not self.pausing:
                self._fail(failure_message(code, argv, Path(self.config.log_path), log_start))
        self.finish_checkpoints(sync)
        self.finish_services()
        self.close_channels()
        self.events.emit("exit", code=code, stopped=self.stopping)
        return code

    # -- replacing another instance: pause, then rejoin the re-formed process group ----------------
    def _watch_control(self) -> None:
        """The controller asks this instance to pause when another one is replaced, and passes on the
        job's profiling when it is updated while the job runs."""
        while not self.stopping:
            self._check_resumed(finished=False)
            if not self.pausing and self.control.poll("pause"):   # a pause while paused waits its turn
                self.pausing = True
                self.say("pausing: another instance is being replaced")
                if self.child and self.child.poll() is None:
                    self.child.send_signal(signal.SIGTERM)  # the same notice an interrupted script gets
            if command := self.control.poll("profiler"):
                self._update_profiler(command["settings"])
            time.sleep(CONTROL_POLL_SECONDS)

    def _update_profiler(self, settings: dict | None) -> None:
        """UpdateTrainingJob's profiling (runtime/profiler/agent.py `update`): the running monitor follows
        it, or one starts; processes started later (a rejoin) get it in their environment."""
        from shipyard.runtime.profiler import agent as profiler

        with self.updating:
            if self.services_finished:
                return
            running = next((run for name, run in self.services if name == "profiler"), None)
            started = profiler.update(running, settings, self.config, self.layout.input_config_dir)
            if running is None and started is not None:
                self.services.append(("profiler", started))
            self.config = dataclasses.replace(self.config, profiler=settings)
            launched = self.launched_profiler
        self.say("profiling updated: " + profiler.describe(settings))
        if settings and settings.get("framework") and launched is not None and launched.get("framework") is None:
            self.events.emit("warning", message="framework metrics begin when the training processes next start: "
                             "they started without framework profiling, so only system metrics are recorded now")

    def _rejoin(self, env: TrainingEnvironment, launcher, sync, code: int) -> tuple[list[str], int]:
        """Keep this instance (its data, code and environment); run the entry point again once the
        replacement is up, with the new rendezvous port. Returns the new command and exit code."""
        if sync is not None:
            sync.flush(timeout=FLUSH_SECONDS)
        self.events.emit("paused", code=code)
        while not self.stopping:
            command = self.control.poll("resume")
            if command:
                break
            time.sleep(CONTROL_POLL_SECONDS)
        else:
            return [], 143
        self.pausing = False
        with self.updating:   # a Ray backend's replacements may be on other nodes: their addresses come too
            self.config = dataclasses.replace(self.config, master_port=command["master_port"],
                                              host_addresses=command.get("host_addresses", self.config.host_addresses))
        self.say(f"rejoining with a replaced instance (rendezvous port {command['master_port']})")
        self._restart_streams()
        return self._launch(env, launcher)

    def _launch(self, env: TrainingEnvironment, launcher) -> tuple[list[str], int]:
        """Run the launcher's command for this instance; returns it and its exit code."""
        with self.updating:   # the control thread may change the profiling meanwhile
            config = self.config
            self.launched_profiler = config.profiler or {}
        plan = launcher.plan(env, config.launch_context())
        self.events.emit("phase", phase="Training", launcher=launcher.name)
        sidecars: list[tuple[str, subprocess.Popen]] = []
        code = None
        try:
            self._start_sidecars(plan.sidecars, env, sidecars)
            script_env = self._with_resume_check(script_environment(config, env, plan.env))
            if plan.wait_for and zygote.forkable(plan.argv) and os.environ.get(zygote.ENV_SOCKET):
                # Forked, the launcher starts in milliseconds, before the leader's; executed, both import
                # their framework for seconds side by side, and waiting would put one after the other.
                self._wait_for_leader(*plan.wait_for)
            code = self.execute(plan.argv, script_env, sidecars)
        finally:
            self._stop_sidecars(sidecars, wait=code == 0)
        return plan.argv, code

    def _wait_for_leader(self, address: str, port: int) -> None:
        """Until the leader's rendezvous listens (or LEADER_WAIT_SECONDS, then the launcher's own retries
        and timeout take over). A connection that only opens and closes is nothing to torch's store."""
        import socket

        deadline = time.monotonic() + LEADER_WAIT_SECONDS
        while time.monotonic() < deadline:
            self._check_stop()
            try:
                socket.create_connection((address, port), timeout=1.0).close()
                return
            except OSError:
                time.sleep(LEADER_POLL_SECONDS)

    def _start_sidecars(self, plans: list, env: TrainingEnvironment, started: list) -> None:
        """The launcher's side processes (TF's parameter server), started before the entry point; each is
        added to `started` as it starts, so those already running are stopped if a later one fails to."""
        for plan in plans:
            self.say("starting beside it: " + " ".join(plan.argv))
            started.append((plan.name or " ".join(plan.argv), subprocess.Popen(
                plan.argv, cwd=self.layout.code_dir, env=script_environment(self.config, env, plan.env),
                stdin=subprocess.DEVNULL, stdout=self.log_fd, stderr=self.log_fd,
            )))

    def _check_sidecars(self, sidecars: list, argv: list[str]) -> None:
        """A sidecar that ended fails the instance, naming it, instead of leaving the script blocked."""
        for name, proc in sidecars:
            if proc.poll() is None:
                continue
            excerpt = error_excerpt(Path(self.config.log_path))  # its own output, before the script's last words
            self.say(f"{name} exited with code {proc.returncode} while the entry point was running; stopping it")
            self.child.send_signal(signal.SIGTERM)
            try:
                self.child.wait(timeout=SCRIPT_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.child.kill()
                self.child.wait()
            raise SidecarExited(
                f'ExecuteUserScriptError:\nExitCode {proc.returncode}\nErrorMessage "{name} exited with code '
                f'{proc.returncode} while the entry point was running:\n{excerpt}"\nCommand "{" ".join(argv)}"'
            )

    def _stop_sidecars(self, sidecars: list, wait: bool) -> None:
        """After the entry point succeeded, SIGTERM and let them finish their work (a parameter server
        waits until the leader is done) for up to SIDECAR_STOP_SECONDS; after a failure or a stop, kill
        them so the outcome is not held up."""
        for _, proc in sidecars:
            proc.send_signal(signal.SIGTERM if wait else signal.SIGKILL)
        deadline = time.monotonic() + SIDECAR_STOP_SECONDS
        for name, proc in sidecars:
            while proc.poll() is None:
                if self.stopping or time.monotonic() >= deadline:
                    if not self.stopping:
                        self.say(f"{name} still running {SIDECAR_STOP_SECONDS:.0f}s after SIGTERM; killing it")
                    proc.kill()
                    proc.wait()
                    break
                time.sleep(0.2)

    # -- a restart that ignores its checkpoint ----------------------------------------------------
    def _with_resume_check(self, env: dict[str, str]) -> dict[str, str]:
        if self.restored:
            env = {**env, "SHIPYARD_CHECKPOINT_WATCH": str(self.config.checkpoint_dir),
                   "SHIPYARD_CHECKPOINT_READ_MARK": str(self.read_mark)}
        return env

    def _check_resumed(self, finished: bool) -> None:
        """Warn once when training goes on (or ends) without any process reading the restored checkpoint."""
        if not self.restored or self.resume_warned or self.read_mark.exists():
            return
        if not finished:
            from shipyard.runtime.heartbeat import read_all

            beats = read_all(self.config.heartbeat_dir) if self.config.heartbeat_dir else []
            if not any(b.get("steps", 0) >= RESUME_CHECK_STEPS for b in beats):
                return
        self.resume_warned = True
        message = (f"restored checkpoint {self.restored!r}, but no process on {self.config.host} read it "
                   "before training; the script probably started again from step 0")
        self.say("WARNING " + message)
        self.events.emit("resume_warning", message=message)

    def _fail(self, message: str) -> int:
        self.say(message.splitlines()[0] if message else "failed")
        failure = self.layout.failure_file
        if not failure.exists():  # the script's own failure message wins, as in the toolkit
            failure.parent.mkdir(parents=True, exist_ok=True)
            failure.write_text(message)
        return 1


def script_environment(
    config: AgentConfig, env: TrainingEnvironment, plan_env: dict[str, str], base: dict[str, str] | None = None
) -> dict[str, str]:
    """The entry point's environment: QUIET_LIBRARIES, this process's, the job's `environment`, the SM_*
    contract, then what the launcher adds; later layers win."""
    base = dict(os.environ if base is None else base)
    child = {**QUIET_LIBRARIES, **{k: v for k, v in base.items() if k not in _INHERITED_DIST_VARS}}
    child.update(config.environment)
    child.update(env.to_env_vars())
    child.update(plan_env)
    layout = Layout(Path(config.base))
    paths = [str(config.site_packages), str(layout.code_dir)]
    if child.get("PYTHONPATH"):
        paths.append(child["PYTHONPATH"])
    # Its sitecustomize makes every Python process write whole lines, and starts the heartbeat.
    paths.append(str(Path(__file__).parent / "inject"))
    child["PYTHONPATH"] = os.pathsep.join(paths)
    child["PYTHONUNBUFFERED"] = "TRUE"  # as SageMaker's containers set it; lines stay whole regardless
    child["SHIPYARD_LINE_BUFFERED"] = "1"
    child["SHIPYARD_INSTANCE_DIR"] = config.instance_dir  # where launchers' helpers meet (mpi.rendezvous)
    child["SHIPYARD_BIND_ADDRESS"] = config.host_addresses[config.host]  # where its servers listen (runtime.bind)
    if config.heartbeat_dir:
        child["SHIPYARD_HEARTBEAT_DIR"] = config.heartbeat_dir
    for name in SERVICES:
        if getattr(config, name):
            child.update(SERVICES.load(name).script_environment(getattr(config, name), config.base))
    child["CUDA_VISIBLE_DEVICES"] = ",".join(config.gpu_ids)
    # The ids are nvidia-smi's (and NVML's, which the profiler reads), numbered in PCI bus order; CUDA's
    # default numbering is fastest first, which on a machine of mixed GPUs names other devices.
    child["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return child


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m shipyard.runtime.agent AGENT_JSON", file=sys.stderr)
        return 2
    return Agent(AgentConfig.read(Path(args[0]))).run()


if __name__ == "__main__":
    sys.exit(main())
