"""Managed spot training end to end: an interrupted job resumes from its last checkpoint in a new
attempt; waiting for capacity is bounded by max_wait; the record says what each attempt restored and
what the job cost."""

from __future__ import annotations

import os
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
    checkpoints = f"file://{tmp_path / 'ckpt'}"
    est = _spot(_source(tmp_path, total=60), checkpoints, instance_count=2, max_run=300, max_wait=600,
                spot_simulation={"interruptions_at": [3.0], "capacity_delay_seconds": 1.0})
    est.fit(logs=False)
    description = est.latest_training_job.describe()
    assert description["TrainingJobStatus"] == "Completed"
    statuses = [t["Status"] for t in description["SecondaryStatusTransitions"]]
    assert statuses == ["Starting", "Downloading", "Training", "Interrupted", "Starting", "Downloading",
                        "Training", "Uploading", "Completed"]
    attempts = description["Attempts"]
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
    # Billing: two attempts of running time, spot-discounted; training time covers the whole job.
    assert description["EnableManagedSpotTraining"] is True
    assert 0 < description["BillableTimeInSeconds"] <= description["TrainingTimeInSeconds"]
    assert "ManagedSpotTrainingSavings" in description
    assert not [w for w in description.get("Warnings", []) if "started again from step 0" in w]


def test_waiting_for_capacity_is_bounded_by_max_wait(home, tmp_path):
    est = _spot(_source(tmp_path, total=1000), f"file://{tmp_path / 'ckpt'}", max_run=6, max_wait=6,
                spot_simulation={"interruptions_at": [2.0], "capacity_delay_seconds": 60})
    started = time.monotonic()
    with pytest.warns(UserWarning, match="MaxWaitTimeExceeded"):
        est.fit(logs=False)
    assert time.monotonic() - started < 40
    description = est.latest_training_job.describe()
    assert (description["TrainingJobStatus"], description["SecondaryStatus"]) == ("Stopped", "MaxWaitTimeExceeded")
    assert [a["Outcome"] for a in description["Attempts"]] == ["Interrupted"]


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
    assert [a["Outcome"] for a in description["Attempts"]] == ["Interrupted", "Completed"]
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
    assert [a["Outcome"] for a in description["Attempts"]] == ["Interrupted", "Interrupted", "Completed"]
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
    attempts = description["Attempts"]
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
    assert [a["Outcome"] for a in est.latest_training_job.describe()["Attempts"]] == ["Failed"]


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
    assert [a["Outcome"] for a in description["Attempts"]] == ["Interrupted", "Completed"]
    warnings = [w for w in description["Warnings"] if "started again from step 0" in w]
    assert warnings == ["restored checkpoint 'state.txt', but no process on algo-1 read it before training; "
                        "the script probably started again from step 0"]


def test_interruption_during_channel_download(home, tmp_path, s3):
    bucket = s3.bucket("slow")
    for i in range(150):
        s3.put(f"{bucket}/train/part-{i:03d}", b"x" * 1024)
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(
        "import os\nn = len(os.listdir('/opt/ml/input/data/train'))\nprint(f'files={n}')\n"
        "open('/opt/ml/model/files.txt', 'w').write(str(n))\n")
    est = _spot(source, f"file://{tmp_path / 'ckpt'}", max_run=300, max_wait=600,
                spot_simulation={"interruptions_at": [0.3]})
    est.fit({"train": f"{bucket}/train"}, logs=False)
    description = est.latest_training_job.describe()
    assert [a["Outcome"] for a in description["Attempts"]] == ["Interrupted", "Completed"]
    with tarfile.open(description["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://")) as tar:
        assert tar.extractfile("files.txt").read() == b"150"  # the new attempt has every object


def test_interruption_during_checkpoint_upload_restores_the_last_complete_one(home, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent("""
        import os, signal, sys, time
        path = "/opt/ml/checkpoints/big.bin"
        if os.path.exists(path):
            data = open(path, "rb").read()
            print(f"restored {len(data)} bytes, uniform={len(set(data)) == 1}", flush=True)
            sys.exit(0)
        open(path, "wb").write(b"a" * 1_000_000)  # a first complete checkpoint
        time.sleep(3)
        def on_notice(*_):
            with open(path, "wb") as f:  # a much larger one, still being written when the SIGKILL comes
                for _ in range(1000):
                    f.write(b"b" * 100_000)
            sys.exit(0)
        signal.signal(signal.SIGTERM, on_notice)
        print("first checkpoint written", flush=True)
        time.sleep(60)
    """))
    est = _spot(source, f"file://{tmp_path / 'ckpt'}", max_run=300, max_wait=600, interruption_notice_seconds=1,
                spot_simulation={"interruptions_at": [5.0]})
    est.fit(logs=False)
    log = Store().log_path(est.latest_training_job.name, "algo-1").read_text()
    restored = [line for line in log.splitlines() if line.startswith("restored ")]
    # Whatever was restored is one whole version of the file, never a mix or a truncated upload.
    assert restored in (["restored 1000000 bytes, uniform=True"], ["restored 100000000 bytes, uniform=True"])


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
    attempts = description["Attempts"]
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



class Outage:
    """A TCP forwarder in front of the S3 server that can refuse connections for a while: the job's
    processes keep one endpoint address, which goes dark and comes back."""

    def __init__(self, target: str) -> None:
        import socket

        self.target = target.removeprefix("http://").split(":")
        self.target = (self.target[0], int(self.target[1]))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.conns: list = []
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
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source, dest) -> None:
        try:
            while data := source.recv(65536):
                dest.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, dest):
                try:
                    sock.close()
                except OSError:
                    pass


def test_checkpoint_endpoint_down_for_a_while_then_back(home, tmp_path, s3, s3_server, monkeypatch, wait_for_line):
    """S3 refuses connections mid-job: the user sees the sync failing, then recovering; training goes
    on, and every checkpoint written during the outage reaches S3 without waiting for the job's end."""
    bucket = s3.bucket("ckpts")
    outage = Outage(s3_server)
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
    stop_file = tmp_path / "stop"
    est = Estimator(entry_point="train.py", source_dir=str(source), checkpoint_s3_uri=f"{bucket}/job",
                    environment={"STOP_FILE": str(stop_file)}, stop_grace_seconds=5)
    est.fit(wait=False)
    job = est.latest_training_job
    store = Store()
    log = store.log_path(job.name, "algo-1")
    wait_for_line(log, "checkpoint 20")

    def remote() -> set[str]:
        return {o["Key"] for o in s3.client.list_objects_v2(Bucket="ckpts").get("Contents", [])}

    def eventually(found, timeout: float = 60):
        """found() once it is truthy (the sync and the store lag the script by rounds and polls)."""
        deadline = time.monotonic() + timeout
        while not (value := found()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return value

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
