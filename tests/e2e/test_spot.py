"""Managed spot training end to end: an interrupted job resumes from its last checkpoint in a new
attempt; waiting for capacity is bounded by max_wait; the record says what each attempt restored and
what the job cost."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from shipyard import Estimator
from shipyard.store import Store

pytestmark = pytest.mark.slow

STEPPER = """
    import json, os, signal, sys, time
    ckpt = "/opt/ml/checkpoints/state-" + os.environ["SM_CURRENT_HOST"] + ".json"
    step = 0
    if os.path.exists(ckpt):
        step = json.load(open(ckpt))["step"]
        print(f"resumed from step {step}", flush=True)
    def save():
        with open(ckpt + ".tmp", "w") as f:
            json.dump({"step": step}, f)
        os.replace(ckpt + ".tmp", ckpt)
    def on_notice(*_):
        save()  # the interruption notice: checkpoint now, then exit
        print(f"notice at step {step}", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_notice)
    while step < TOTAL:
        step += 1
        print(f"step={step}", flush=True)
        time.sleep(0.1)
        if step % EVERY == 0:
            save()
    open("/opt/ml/model/final-" + os.environ["SM_CURRENT_HOST"] + ".txt", "w").write(str(step))
"""


def _source(tmp_path: Path, total: int, every: int = 5) -> Path:
    """A script of `total` 0.1 s steps that checkpoints every `every` steps and on the notice."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent(STEPPER).replace("TOTAL", str(total)).replace("EVERY", str(every)))
    return source


def _spot(source: Path, checkpoints: str, **kwargs) -> Estimator:
    kwargs.setdefault("interruption_notice_seconds", 5)
    return Estimator(entry_point="train.py", source_dir=str(source), use_spot_instances=True,
                     checkpoint_s3_uri=checkpoints, stop_grace_seconds=5, **kwargs)


def test_interrupted_job_resumes_from_its_checkpoint(home, tmp_path):
    # A priced type: ml.m5.large at prices of the user's own (36 $/h is 0.01 $/s, spot 30 % of it). Two
    # instances of 2 vCPUs do not fit a 2-core machine side by side, hence oversubscribe.
    home.mkdir(parents=True)
    (home / "instance_types.yaml").write_text(
        "ml.m5.large: {on_demand_usd_per_hour: 36.0, spot_usd_per_hour: 10.8}\n")
    checkpoints = f"file://{tmp_path / 'ckpt'}"
    est = _spot(_source(tmp_path, total=60), checkpoints, instance_type="ml.m5.large", instance_count=2,
                oversubscribe=True, max_run=300, max_wait=600,
                spot_simulation={"interruptions_at": [3.0], "capacity_delay_seconds": 1.0})
    submitted = time.time()
    est.fit(logs=False)
    finished = time.time()
    description = est.latest_training_job.describe()
    assert description["TrainingJobStatus"] == "Completed"
    statuses = [t["Status"] for t in description["SecondaryStatusTransitions"]]
    assert statuses == ["Starting", "Downloading", "Training", "Interrupted", "Starting", "Downloading",
                        "Training", "Uploading", "Completed"]
    attempts = description["Shipyard"]["Attempts"]
    assert [a["Outcome"] for a in attempts] == ["Interrupted", "Completed"]
    assert attempts[1]["RestoredCheckpoint"]  # the record names what the restart restored
    log = (Path(os.environ["SHIPYARD_HOME"]) / "jobs" / est.latest_training_job.name / "logs" / "algo-1.log").read_text()
    resumed = [int(line.split()[-1]) for line in log.splitlines() if line.startswith("resumed from step")]
    noticed = [int(line.split()[-1]) for line in log.splitlines() if line.startswith("notice at step")]
    assert len(resumed) == 1 and len(noticed) == 1
    assert resumed[0] == noticed[0] > 0  # the notice-time checkpoint is what the new attempt restored
    with tarfile.open(description["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://")) as tar:
        assert sorted(tar.getnames()) == ["final-algo-1.txt", "final-algo-2.txt"]
    assert (tmp_path / "ckpt" / "state-algo-2.json").exists()
    assert not [w for w in description["Shipyard"].get("Warnings", []) if "started again from step 0" in w]
    # Billing, from the times the store measured: training time is the whole job, waits included; the
    # two attempts' running time is billed at the spot price, and the capacity wait between them is not.
    store = Store()
    record = store.get_job(est.latest_training_job.name)
    runs = [(a["start_time"], a["end_time"]) for a in store.attempts(record.name)]
    assert submitted < record.training_start_time == runs[0][0] < runs[1][1] < record.training_end_time < finished
    assert runs[0][1] - runs[0][0] >= 3.0 and runs[1][0] - runs[0][1] >= 1.0  # interrupted at 3 s; 1 s without capacity
    training = record.training_end_time - record.training_start_time
    running = sum(end - start for start, end in runs)
    assert description["EnableManagedSpotTraining"] is True
    # Rounding is all the slack: whole seconds, savings to 0.1 %, dollars to 6 decimals.
    assert abs(description["TrainingTimeInSeconds"] - training) <= 0.5
    assert abs(description["BillableTimeInSeconds"] - running * 10.8 / 36.0) <= 0.5
    assert abs(description["Shipyard"]["ManagedSpotTrainingSavings"] - (1 - running * 0.3 / training) * 100) <= 0.05
    cost = description["Shipyard"]["Cost"]
    assert abs(cost["InstanceSeconds"] - 2 * running) <= 5e-4
    assert abs(cost["Amount"] - 2 * running * 0.003) <= 5e-7           # 10.8 $/h = 0.003 $/s
    assert abs(cost["OnDemandAmount"] - 2 * running * 0.01) <= 5e-7


def test_waiting_for_capacity_is_bounded_by_max_wait(home, tmp_path):
    est = _spot(_source(tmp_path, total=1000), f"file://{tmp_path / 'ckpt'}", max_run=6, max_wait=6,
                spot_simulation={"interruptions_at": [2.0], "capacity_delay_seconds": 60})
    started = time.monotonic()
    with pytest.warns(UserWarning, match="MaxWaitTimeExceeded"):
        est.fit(logs=False)
    assert time.monotonic() - started < 40
    description = est.latest_training_job.describe()
    assert (description["TrainingJobStatus"], description["SecondaryStatus"]) == ("Stopped", "MaxWaitTimeExceeded")
    assert [a["Outcome"] for a in description["Shipyard"]["Attempts"]] == ["Interrupted"]


def test_cli_interrupt_of_one_host(home, tmp_path, wait_for_line):
    est = _spot(_source(tmp_path, total=80), f"file://{tmp_path / 'ckpt'}", instance_count=2, max_run=300,
                max_wait=600)
    est.fit(wait=False)
    job = est.latest_training_job
    log = Store().log_path(job.name, "algo-2")
    wait_for_line(log, "step=3")
    cli = [sys.executable, "-m", "shipyard.cli.main"]
    done = subprocess.run([*cli, "spot", "interrupt", job.name, "--host", "algo-3"], capture_output=True, text=True)
    assert done.returncode == 2 and "did you mean" in done.stderr
    done = subprocess.run([*cli, "spot", "interrupt", job.name, "--host", "algo-2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    description = job.wait(logs=False)
    assert description["TrainingJobStatus"] == "Completed"
    assert [a["Outcome"] for a in description["Shipyard"]["Attempts"]] == ["Interrupted", "Completed"]
    statuses = [(t["Status"], t["StatusMessage"]) for t in description["SecondaryStatusTransitions"]]
    assert ("Starting", "Replacing algo-2; the other instances rejoin") in statuses
    assert [s for s, _ in statuses][-5:] == ["Starting", "Downloading", "Training", "Uploading", "Completed"]
    # Only the lost instance was replaced: algo-1 kept its instance (no second download) and rejoined.
    instances = Path(os.environ["SHIPYARD_HOME"]) / "jobs" / job.name / "instances"
    assert sorted(p.name for p in instances.iterdir()) == ["algo-1", "algo-2", "algo-2-2"]
    survivor = Store().log_path(job.name, "algo-1").read_text()
    assert survivor.count("shipyard-agent INFO running:") == 2
    assert survivor.count("checkpoints: restored") == 1
    assert "rejoining with a replaced instance" in survivor
    assert "resumed from step" in survivor and "resumed from step" in log.read_text()


def test_two_interruptions_in_a_row(home, tmp_path):
    est = _spot(_source(tmp_path, total=50), f"file://{tmp_path / 'ckpt'}", max_run=300, max_wait=600,
                spot_simulation={"interruptions_at": [2.5, 2.5]})
    est.fit(logs=False)
    description = est.latest_training_job.describe()
    assert [a["Outcome"] for a in description["Shipyard"]["Attempts"]] == ["Interrupted", "Interrupted", "Completed"]
    assert [t["Status"] for t in description["SecondaryStatusTransitions"]].count("Interrupted") == 2
    log = (Path(os.environ["SHIPYARD_HOME"]) / "jobs" / est.latest_training_job.name / "logs" / "algo-1.log").read_text()
    resumed = [int(line.split()[-1]) for line in log.splitlines() if line.startswith("resumed from step")]
    assert len(resumed) == 2 and 0 < resumed[0] < resumed[1]  # each attempt moved the job forward


def test_platform_failure_is_retried(home, tmp_path, wait_for_line):
    import psutil

    source = _source(tmp_path, total=40)
    est = Estimator(entry_point="train.py", source_dir=str(source), max_retry_attempts=1, stop_grace_seconds=5,
                    checkpoint_s3_uri=f"file://{tmp_path / 'ckpt'}")
    est.fit(wait=False)
    job = est.latest_training_job
    store = Store()
    wait_for_line(store.log_path(job.name, "algo-1"), "step=7")
    controller = psutil.Process(store.get_job(job.name).controller_pid)
    agent = next(p for p in controller.children(recursive=True)
                 if "shipyard.runtime.agent" in " ".join(p.cmdline()) and p.name() != "bwrap")
    agent.kill()  # an instance agent dying is the platform's failure, not the script's
    description = job.wait(logs=False)
    attempts = description["Shipyard"]["Attempts"]
    assert [a["Outcome"] for a in attempts] == ["Failed", "Completed"]
    assert "InternalServerError: algo-1" in attempts[0]["Reason"]
    assert any(t["StatusMessage"].startswith("Retrying after a platform failure")
               for t in description["SecondaryStatusTransitions"])


def test_script_error_is_not_retried(home, tmp_path):
    from shipyard.errors import UnexpectedStatusError

    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("raise ValueError('the script is wrong')\n")
    est = Estimator(entry_point="train.py", source_dir=str(source), max_retry_attempts=2, stop_grace_seconds=5)
    with pytest.raises(UnexpectedStatusError, match="ValueError"):
        est.fit(logs=False)
    assert [a["Outcome"] for a in est.latest_training_job.describe()["Shipyard"]["Attempts"]] == ["Failed"]


def test_a_restart_that_ignores_its_checkpoint_is_reported(home, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent("""
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        for step in range(1, 25):  # never looks at /opt/ml/checkpoints before training
            with open("/opt/ml/checkpoints/state.txt", "w") as f:
                f.write(str(step))
            time.sleep(0.1)
    """))
    est = _spot(source, f"file://{tmp_path / 'ckpt'}", max_run=300, max_wait=600,
                spot_simulation={"interruptions_at": [1.5]})
    est.fit(logs=False)
    description = est.latest_training_job.describe()
    assert [a["Outcome"] for a in description["Shipyard"]["Attempts"]] == ["Interrupted", "Completed"]
    warnings = [w for w in description["Shipyard"]["Warnings"] if "started again from step 0" in w]
    assert warnings == ["restored checkpoint 'state.txt', but no process on algo-1 read it before training; "
                        "the script probably started again from step 0"]


def test_interruption_during_channel_download(home, tmp_path, s3, s3_proxy):
    """The interruption lands when 50 of a channel's 150 objects are downloaded and the rest are held by
    the endpoint: the next attempt links those 50 from the first and fetches only the other 100 (issue 17:
    resumable File mode)."""
    bucket = s3.bucket("slow")
    for i in range(150):
        s3.put(f"{bucket}/train/part-{i:03d}", b"x" * 1024)
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(
        "import os\nn = len(os.listdir('/opt/ml/input/data/train'))\nprint(f'files={n}')\n"
        "open('/opt/ml/model/files.txt', 'w').write(str(n))\n")
    s3_proxy.hold("slow", after=50)
    est = _spot(source, f"file://{tmp_path / 'ckpt'}", max_run=300, max_wait=600)
    est.fit({"train": f"{bucket}/train"}, wait=False)
    job = est.latest_training_job
    store = Store()
    done = store.job_dir(job.name) / "instances" / "algo-1" / "downloads" / "train.jsonl"
    assert eventually(lambda: done.exists() and len(done.read_text().splitlines()) == 50)
    assert store.request_interrupt(job.name)
    # The first attempt's instance is gone once the next attempt starts: nothing more of it is recorded.
    assert eventually(lambda: any(t["StatusMessage"].startswith("Restarting after a spot interruption")
                                  for t in job.describe()["SecondaryStatusTransitions"]))
    done_first = done.read_text().splitlines()
    s3_proxy.release()
    description = job.wait(logs=False)
    assert [a["Outcome"] for a in description["Shipyard"]["Attempts"]] == ["Interrupted", "Completed"]
    with tarfile.open(description["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://")) as tar:
        assert tar.extractfile("files.txt").read() == b"150"  # the new attempt has every object
    assert len(done_first) == 50
    second = (store.job_dir(job.name) / "logs" / "algo-1.log").read_text().split("channel train: 150 objects, ")[-1]
    assert second.startswith(f"{1024 * 100} bytes fetched"), second
    assert "; 50 unchanged since an earlier attempt, linked from it" in second.splitlines()[0], second


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs as the checkpoint disk needs root")
def test_disk_full_while_writing_a_checkpoint(home, tmp_path):
    """The script's checkpoint write fails with ENOSPC: the job fails with that error named, and the
    last complete checkpoint is still what the checkpoint URI holds."""
    disk = tmp_path / "small-disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        source = tmp_path / "src"
        source.mkdir()
        (source / "train.py").write_text(textwrap.dedent(f"""
            import os, time
            path = {str(disk / 'model.bin')!r}
            open(path, "wb").write(b"a" * 1_000_000)   # fits
            time.sleep(2.5)                             # synced
            with open(path + ".tmp", "wb") as f:        # the next one does not fit
                f.write(b"b" * 3_000_000)
            os.replace(path + ".tmp", path)
        """))
        est = Estimator(entry_point="train.py", source_dir=str(source), stop_grace_seconds=5,
                        checkpoint_s3_uri=f"file://{tmp_path / 'ckpt'}", checkpoint_local_path=str(disk))
        from shipyard.errors import UnexpectedStatusError

        with pytest.raises(UnexpectedStatusError, match="No space left on device"):
            est.fit(logs=False)
        # The complete checkpoint survived; the failed write only ever existed under its temporary name.
        assert (tmp_path / "ckpt" / "model.bin").read_bytes() == b"a" * 1_000_000
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def _steps(log: str, prefix: str) -> list[int]:
    return [int(line.split("=" if prefix == "step=" else " ")[-1]) for line in log.splitlines()
            if line.startswith(prefix)]


def test_killed_controller_is_taken_over_and_the_job_resumes(home, tmp_path, wait_for_line):
    """kill -9 of the controller is a platform failure: the next command that reads the job starts a new
    controller, whose attempt restores the checkpoint; the dead one's instances are gone, nothing lost."""
    import psutil

    est = Estimator(entry_point="train.py", source_dir=str(_source(tmp_path, total=70, every=20)), instance_count=2,
                    max_retry_attempts=1, stop_grace_seconds=5, checkpoint_s3_uri=f"file://{tmp_path / 'ckpt'}")
    est.fit(wait=False)
    job = est.latest_training_job
    store = Store()
    log = store.log_path(job.name, "algo-1")
    wait_for_line(log, "step=45")
    # The step-20 checkpoint must be remote before the kill (its upload takes up to two 1 s scans).
    wait_for_line(tmp_path / "ckpt" / "state-algo-1.json", '"step": ')
    controller = psutil.Process(store.get_job(job.name).controller_pid)
    first_instances = controller.children(recursive=True)
    controller.kill()
    controller.wait(10)
    psutil.wait_procs(first_instances, timeout=20)
    assert not [p for p in first_instances if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    before = log.read_text()
    description = job.wait(logs=False)  # reading the job notices the dead controller and continues it
    assert description["TrainingJobStatus"] == "Completed"
    attempts = description["Shipyard"]["Attempts"]
    assert [a["Outcome"] for a in attempts] == ["Failed", "Completed"]
    assert "controller" in attempts[0]["Reason"] and attempts[1]["RestoredCheckpoint"]
    statuses = [(t["Status"], t["StatusMessage"]) for t in description["SecondaryStatusTransitions"]]
    assert ("Starting", "Retrying after a platform failure (retry 1 of 1)") in statuses
    assert store.get_job(job.name).controller_pid != controller.pid
    # Steps lost: at most the script's checkpoint interval (20 steps) plus the sync's latency: a file is
    # uploaded once two scans a second apart see it unchanged (at most 2 s, 20 steps).
    log_after = log.read_text()
    assert log_after.startswith(before)  # the first attempt's lines are all still there
    resumed = _steps(log_after, "resumed from step")
    assert len(resumed) == 1 and resumed[0] % 20 == 0
    assert 0 < max(_steps(before, "step=")) - resumed[0] <= 40
    with tarfile.open(description["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://")) as tar:
        assert sorted(tar.getnames()) == ["final-algo-1.txt", "final-algo-2.txt"]



def eventually(found, timeout: float = 60):
    """found() once it is truthy (the sync and the store lag the script by rounds and polls)."""
    deadline = time.monotonic() + timeout
    while not (value := found()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return value


@dataclasses.dataclass
class HeldPut:
    """A PUT that S3Proxy held: its head and half its body reached S3, the rest never did."""

    started: float
    content_length: int | None
    forwarded: int = 0              # body bytes passed on to S3
    closed: float | None = None     # when its connection ended


class S3Proxy:
    """A TCP forwarder in front of the S3 server that the test controls. It can refuse connections for a
    while (the job's processes keep one endpoint address, which goes dark and comes back), and it can
    hold one PUT in flight: S3 gets part of it and waits for the rest, the client waits for an answer."""

    def __init__(self, target: str) -> None:
        import socket

        self.target = target.removeprefix("http://").split(":")
        self.target = (self.target[0], int(self.target[1]))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.conns: list = []
        self.hold_line: bytes | None = None
        self.held: list[HeldPut] = []
        self.up()

    def up(self) -> None:
        import socket
        import threading

        self.listener = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def down(self) -> None:
        """Connections are refused from now on, and open ones are cut."""
        self.listener.close()
        for conn in self.conns:
            conn.close()
        self.conns.clear()

    def hold(self, path: str) -> None:
        """Hold the next PUT of `path` (/bucket/key) until its connection ends."""
        self.hold_line = f"PUT {path} ".encode()

    def _accept(self, listener) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self.conns += [client, server]
            for a, b, upstream in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pipe, args=(a, b, upstream), daemon=True).start()

    def _pipe(self, source, dest, upstream: bool) -> None:
        held = None
        try:
            while data := source.recv(65536):
                # A client that does not pipeline starts each request in a read of its own.
                if upstream and held is None and self.hold_line and data.startswith(self.hold_line):
                    self.hold_line = None
                    length = re.search(rb"(?im)^content-length: *(\d+)", data)
                    held = HeldPut(time.time(), int(length[1]) if length else None)
                    self.held.append(held)
                    head, _, data = data.partition(b"\r\n\r\n")
                    dest.sendall(head + b"\r\n\r\n")
                if held is not None:
                    data = data[:max(0, (held.content_length or 0) // 2 - held.forwarded)]
                    held.forwarded += len(data)
                dest.sendall(data)
        except OSError:
            pass
        finally:
            if held is not None:
                held.closed = time.time()
            for sock in (source, dest):
                try:
                    sock.close()
                except OSError:
                    pass


def test_interruption_during_checkpoint_upload_restores_the_last_complete_one(home, tmp_path, s3, s3_server,
                                                                               monkeypatch):
    """The interruption lands while the newest checkpoint's upload is in flight (held by the proxy: half
    its body reached S3, which waits for the rest): the instance is killed mid-upload, S3 keeps the
    previous version whole, and the restart restores that one."""
    bucket = s3.bucket("ckpts")
    proxy = S3Proxy(s3_server)
    monkeypatch.setenv("SHIPYARD_S3_ENDPOINT_URL", proxy.endpoint)
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent("""
        import os, signal, sys, time
        path = "/opt/ml/checkpoints/big.bin"
        if os.path.exists(path):
            data = open(path, "rb").read()
            print(f"restored {len(data)} bytes of {bytes(sorted(set(data)))!r}", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        open(path, "wb").write(b"a" * 1_000_000)  # the first checkpoint
        while not os.path.exists(os.environ["GO_FILE"]):  # until the test has seen it in S3
            time.sleep(0.1)
        open(path, "wb").write(b"b" * 4_000_000)  # the next one, whose upload the interruption cuts off
        time.sleep(300)
    """))
    signals = tmp_path / "signals"  # a local channel: the instance sees its directory, live and read-only
    signals.mkdir()
    go = signals / "go"
    est = _spot(source, f"{bucket}/job", max_run=300, max_wait=600, interruption_notice_seconds=2,
                environment={"GO_FILE": str(go)})
    est.fit({"signals": f"file://{signals}"}, wait=False)
    job = est.latest_training_job
    first = b"a" * 1_000_000

    def remote() -> bytes | None:
        try:
            return s3.get(f"{bucket}/job/big.bin")
        except s3.client.exceptions.NoSuchKey:
            return None

    assert eventually(lambda: remote() == first)
    proxy.hold("/ckpts/job/big.bin")
    go.touch()
    assert eventually(lambda: proxy.held), "the second checkpoint's upload never started"
    store = Store()
    assert store.request_interrupt(job.name)
    description = job.wait(logs=False)
    assert description["TrainingJobStatus"] == "Completed"
    attempts = description["Shipyard"]["Attempts"]
    assert [a["Outcome"] for a in attempts] == ["Interrupted", "Completed"]
    assert attempts[1]["RestoredCheckpoint"] == "big.bin"
    # The interruption came while the second checkpoint's PUT was open, half sent and unanswered; the
    # connection ended only with the instance (killed when its notice ran out).
    assert len(proxy.held) == 1
    held = proxy.held[0]
    interrupted = next(t["StartTime"].timestamp() for t in description["SecondaryStatusTransitions"]
                       if t["Status"] == "Interrupted")
    assert held.started < interrupted < held.closed
    assert (held.content_length, held.forwarded) == (4_000_000, 2_000_000)
    # The instance agrees: only the first checkpoint was uploaded, and its final sync never finished.
    events = [json.loads(line) for line in (store.job_dir(job.name) / "events" / "algo-1.jsonl").open()]
    assert [e["bytes"] for e in events if e["event"] == "checkpoint_uploaded"] == [1_000_000]
    assert not [e for e in events if e["event"] == "checkpoint_flushed"]
    # S3 kept the first checkpoint whole, and that is what the restarted script read.
    assert remote() == first
    log = store.log_path(job.name, "algo-1").read_text()
    assert [line for line in log.splitlines() if line.startswith("restored ")] == ["restored 1000000 bytes of b'a'"]


def test_checkpoint_endpoint_down_for_a_while_then_back(home, tmp_path, s3, s3_server, monkeypatch, wait_for_line):
    """S3 refuses connections mid-job: the user sees the sync failing, then recovering; training goes
    on, and every checkpoint written during the outage reaches S3 without waiting for the job's end."""
    bucket = s3.bucket("ckpts")
    outage = S3Proxy(s3_server)
    monkeypatch.setenv("SHIPYARD_S3_ENDPOINT_URL", outage.endpoint)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent("""
        import os, time
        step = 0
        while not os.path.exists(os.environ["STOP_FILE"]):
            step += 1
            if step % 10 == 0:
                open(f"/opt/ml/checkpoints/ckpt-{step:04d}.txt", "w").write(str(step))
                print(f"checkpoint {step}", flush=True)
            time.sleep(0.1)
    """))
    signals = tmp_path / "signals"  # a local channel: the instance sees its directory, live and read-only
    signals.mkdir()
    stop_file = signals / "stop"
    est = Estimator(entry_point="train.py", source_dir=str(source), checkpoint_s3_uri=f"{bucket}/job",
                    environment={"STOP_FILE": str(stop_file)}, stop_grace_seconds=5)
    est.fit({"signals": f"file://{signals}"}, wait=False)
    job = est.latest_training_job
    store = Store()
    log = store.log_path(job.name, "algo-1")
    wait_for_line(log, "checkpoint 20")

    def remote() -> set[str]:
        return {o["Key"] for o in s3.client.list_objects_v2(Bucket="ckpts").get("Contents", [])}

    def warnings(text: str) -> list[dict]:
        return [e for e in store.events(job.name, kind="warning") if text in e["message"]]

    eventually(lambda: "job/ckpt-0020.txt" in remote())
    outage.down()
    wait_for_line(log, "checkpoint 110", timeout=90)
    failed = eventually(lambda: warnings("checkpoint sync failed"))  # after 5 failed 1 s rounds
    assert failed and failed[0]["host"] == "algo-1"
    assert "ckpt-0110.txt" not in {k.rsplit("/", 1)[-1] for k in remote()}
    outage.up()
    written = {f"job/ckpt-{s:04d}.txt" for s in range(10, 111, 10)}
    assert eventually(lambda: written <= remote())
    assert eventually(lambda: [e for e in store.events(job.name) if "checkpoint sync recovered" in e["message"]])
    assert not store.get_job(job.name).terminal  # recovered while training, not by the final flush
    stop_file.touch()
    description = job.wait(logs=False)
    assert description["TrainingJobStatus"] == "Completed"
    steps = [int(line.split()[-1]) for line in log.read_text().splitlines() if line.startswith("checkpoint ")]
    assert remote() == {f"job/ckpt-{s:04d}.txt" for s in steps}  # no checkpoint was lost
