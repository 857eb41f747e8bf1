"""Input modes end to end: real jobs in sandboxes reading channels on moto's S3 server (through a proxy
the test can hold and break) and on local directories, each checked from inside the instance
(scripts/input_probe.py) and from the outside (what the endpoint sent, what is mounted, what is left)."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from shipyard import Estimator
from shipyard.inputs import FileSystemInput, ShuffleConfig, TrainingInput
from shipyard.runtime import lazyfiles
from shipyard.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]
SCRIPTS = Path(__file__).parent / "scripts"
MB = 1024 * 1024
# What serves FastFile here by default (runtime/fastfile.py): lazy files where this root process may watch
# the disk jobs live on (Linux 6.14+ on ext4, xfs or btrfs), else rclone.
LAZY_PROBLEM = lazyfiles.problem(Path(tempfile.gettempdir()))
KIND = "rclone" if LAZY_PROBLEM else "lazy files"
needs_lazy = pytest.mark.skipif(LAZY_PROBLEM is not None, reason=f"lazy files cannot serve here: {LAZY_PROBLEM}")


def _estimator(**kwargs) -> Estimator:
    return Estimator(entry_point="input_probe.py", source_dir=str(SCRIPTS / "probe"), instance_type="local",
                     max_run=300, stop_grace_seconds=2, **kwargs)


def _model(est: Estimator, tmp_path: Path) -> dict[str, bytes]:
    from shipyard.storage import transfer

    transfer.download(est.model_data, tmp_path / "model")
    with tarfile.open(tmp_path / "model" / "model.tar.gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _reports(est: Estimator, tmp_path: Path) -> dict[str, dict]:
    """Each host's report, from the job's model.tar.gz."""
    return {name.removesuffix(".json"): json.loads(body) for name, body in _model(est, tmp_path).items()
            if name.endswith(".json")}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_fastfile_starts_before_any_body_is_fetched_and_shards_by_key(home, s3_proxy, s3, tmp_path, wait_for_line):
    bucket = s3.bucket("fastfile")
    big = os.urandom(64 * MB)
    s3.put(f"{bucket}/big/blob.bin", big)
    parts = {f"part-{i:02d}.txt": f"part {i}\n".encode() * (i + 1) for i in range(7)}
    for key, body in parts.items():
        s3.put(f"{bucket}/shards/{key}", body)
    s3.put(f"{bucket}/shards/nested/deep.txt", b"deep\n")
    s3.bucket("out")

    s3_proxy.hold("fastfile")   # no object body leaves the endpoint until the scripts have started
    est = _estimator(instance_count=2, input_mode="FastFile", output_path="s3://out/jobs",
                     hyperparameters={"read_bytes": 4096})
    est.fit({"big": f"{bucket}/big/", "shards": TrainingInput(f"{bucket}/shards", distribution="ShardedByS3Key")},
            wait=False)
    store, name = Store(), est.latest_training_job.name
    for host in ("algo-1", "algo-2"):
        wait_for_line(store.log_path(name, host), "probe: started", timeout=120)
    assert not [key for key in s3_proxy.sent if key.startswith("fastfile/")], "fetched before the script started"
    s3_proxy.release()
    est.latest_training_job.wait(logs=False)
    assert est.latest_training_job.describe()["TrainingJobStatus"] == "Completed"

    reports = _reports(est, tmp_path)
    for host, report in reports.items():
        seen = report["channels"]["big"]
        assert seen["files"] == {"blob.bin": {"size": len(big), "sha256": _sha(big[:4096])}}
        assert seen["mount"]["read_only"] and seen["write"] == "Read-only file system"
        assert (seen["mount"]["type"] == "fuse.rclone") == (KIND == "rclone")
        assert f"channel big: mounted (FastFile, {KIND})" in store.log_path(name, host).read_text()
        assert report["config"]["big"]["TrainingInputMode"] == "FastFile"
    # Reading 4 KiB of a 64 MiB object fetched a read-ahead window on each host, not the object.
    assert 0 < s3_proxy.sent["fastfile/big/blob.bin"] < len(big) * 2 * 0.8
    shards = [set(reports[h]["channels"]["shards"]["files"]) for h in ("algo-1", "algo-2")]
    everything = {*parts, "nested/deep.txt"}
    assert not shards[0] & shards[1] and shards[0] | shards[1] == everything
    assert shards[0] == set(sorted(everything)[0::2])   # round robin over the sorted keys, as File mode
    for key, body in parts.items():
        host = "algo-1" if key in shards[0] else "algo-2"
        assert reports[host]["channels"]["shards"]["files"][key]["sha256"] == _sha(body[:4096])
    description = est.latest_training_job.describe()
    assert description["AlgorithmSpecification"]["TrainingInputMode"] == "FastFile"
    assert [c["InputMode"] for c in description["InputDataConfig"]] == ["FastFile", "FastFile"]


def test_file_system_channel_beside_a_file_channel(home, tmp_path):
    """A FileSystemInput is its directory, read-only, at the channel (no copy); a File channel beside it is
    copied; inputdataconfig and describe() show both as SageMaker does."""
    shared = tmp_path / "efs" / "datasets"
    (shared / "sub").mkdir(parents=True)
    (shared / "a.txt").write_text("on the file system\n")
    (shared / "sub" / "b.txt").write_text("nested\n")
    local = tmp_path / "local"
    local.mkdir()
    (local / "c.txt").write_text("copied\n")

    est = _estimator()
    est.fit({"fs": FileSystemInput(file_system_id="fs-0123", file_system_type="EFS", directory_path=str(shared)),
             "copy": f"file://{local}"}, wait=True, logs=False)
    report = _reports(est, tmp_path)["algo-1"]
    fs = report["channels"]["fs"]
    assert fs["files"] == {"a.txt": {"size": 19, "sha256": _sha(b"on the file system\n")},
                           "sub/b.txt": {"size": 7, "sha256": _sha(b"nested\n")}}
    assert fs["mount"]["point"] == "/opt/ml/input/data/fs" and fs["mount"]["read_only"]
    assert fs["write"] == "Read-only file system"
    assert report["channels"]["copy"]["write"] == "allowed"   # a File channel is the instance's own copy
    assert report["config"] == {"fs": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated",
                                       "RecordWrapperType": "None"},
                                "copy": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated",
                                         "RecordWrapperType": "None"}}
    channel = est.latest_training_job.describe()["InputDataConfig"][0]
    assert channel["DataSource"] == {"FileSystemDataSource": {
        "FileSystemId": "fs-0123", "FileSystemAccessMode": "ro", "FileSystemType": "EFS",
        "DirectoryPath": str(shared)}}
    assert not (shared / "written-by-the-script").exists()


def _records(stream: bytes) -> list[bytes]:
    """SageMaker's RecordIO framing, parsed independently of shipyard's writer: magic, length, data,
    zero padding to 4 bytes."""
    import struct

    records, at = [], 0
    while at < len(stream):
        magic, header = struct.unpack_from("<II", stream, at)
        assert magic == 0xCED7230A and header >> 29 == 0
        length = header & ((1 << 29) - 1)
        records.append(stream[at + 8:at + 8 + length])
        padded = 8 + length + (-length % 4)
        assert stream[at + 8 + length:at + padded] == b"\0" * (-length % 4)
        at += padded
    return records


def test_pipe_channels_stream_epochs_beside_a_file_channel(home, s3, tmp_path):
    """Two hosts; `train` is gzipped objects on S3 in Pipe mode, unpacked and framed as RecordIO, sharded by
    key and reshuffled every epoch; `validation` is a plain Pipe channel read at its own pace; `extra` is a
    File channel in the same job."""
    import gzip

    bucket = s3.bucket("pipes")
    objects = {f"train/obj-{i}.bin": os.urandom(1000 + 333 * i) for i in range(6)}
    for key, body in objects.items():
        s3.put(f"{bucket}/{key}", gzip.compress(body))
    validation = tmp_path / "validation"
    validation.mkdir()
    (validation / "v1.txt").write_bytes(b"first\n")
    (validation / "v2.txt").write_bytes(b"second, not padded")
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "e.txt").write_text("copied\n")

    est = _estimator(instance_count=2, hyperparameters={"pipe_epochs": 3})
    est.fit({"train": TrainingInput(f"{bucket}/train/", input_mode="Pipe", compression="Gzip",
                                    record_wrapping="RecordIO", distribution="ShardedByS3Key",
                                    shuffle_config=ShuffleConfig(7)),
             "validation": TrainingInput(str(validation), input_mode="Pipe"),
             "extra": str(extra)}, wait=True, logs=False)
    model = _model(est, tmp_path)
    reports = _reports(est, tmp_path)
    everything = sorted(objects.values())
    orders = []
    for epoch in range(3):
        shards = [_records(model[f"{host}/train_{epoch}"]) for host in ("algo-1", "algo-2")]
        assert sorted(shards[0] + shards[1]) == everything   # each epoch: every object once, across the hosts
        orders.append(shards)
        for host in ("algo-1", "algo-2"):
            assert model[f"{host}/validation_{epoch}"] == b"first\nsecond, not padded"   # sorted, unframed
    assert orders[0] != orders[1] != orders[2]   # reshuffled (and re-dealt) every epoch
    assert est.latest_training_job.describe()["InputDataConfig"][0]["ShuffleConfig"] == {"Seed": 7}
    for report in reports.values():
        assert report["config"]["train"] == {"TrainingInputMode": "Pipe", "S3DistributionType": "ShardedByS3Key",
                                             "RecordWrapperType": "RecordIO"}
        assert report["config"]["extra"]["TrainingInputMode"] == "File"
        assert report["channels"]["extra"]["files"]["e.txt"]["size"] == 7


def _rclones(job_dir: Path) -> list:
    import psutil

    found = []
    for process in psutil.process_iter(["cmdline"]):
        command = process.info["cmdline"] or []
        if command[:2] == ["rclone", "mount"] and any(str(job_dir) in part for part in command):
            found.append(process)
    return found


@pytest.mark.parametrize("kind", ["rclone", pytest.param("lazy files", marks=needs_lazy)])
def test_fastfile_mount_goes_with_a_killed_agent(kind, home, tmp_path, wait_for_line, monkeypatch):
    import psutil

    if kind == "rclone":
        monkeypatch.setenv("SHIPYARD_FASTFILE", "rclone")
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.bin").write_bytes(os.urandom(1024))
    est = _estimator(input_mode="FastFile", hyperparameters={"hold_seconds": 120})
    est.fit({"train": str(data)}, wait=False)
    store, name = Store(), est.latest_training_job.name
    wait_for_line(store.log_path(name, "algo-1"), "probe: holding /opt/ml/input/data/train/x.bin")
    assert f"channel train: mounted (FastFile, {kind})" in store.log_path(name, "algo-1").read_text()
    job_dir = store.job_dir(name)
    # the mount is there, served by rclone (or by the agent itself), while the script reads it
    assert len(_rclones(job_dir)) == (kind == "rclone")
    agents = [p for p in psutil.process_iter(["cmdline"]) if (command := p.info["cmdline"] or [])
              and "bwrap" not in command[0] and "shipyard.runtime.agent" in command
              and any(str(job_dir) in part for part in command)]
    assert len(agents) == 1
    if kind == "lazy files":
        # The script holds the channel's fanotify group too: with the agent gone, a read still waiting for
        # its bytes keeps waiting until the sandbox's processes are killed, rather than get a hole's zeros.
        (script,) = [p for p in psutil.process_iter(["cmdline"]) if "input_probe.py" in (p.info["cmdline"] or [])
                     and any(str(job_dir) in f.path for f in p.open_files())]
        assert "anon_inode:[fanotify]" in {os.readlink(f"/proc/{script.pid}/fd/{fd}")
                                           for fd in os.listdir(f"/proc/{script.pid}/fd")}
    agents[0].kill()
    deadline = time.monotonic() + 60
    while est.latest_training_job.describe()["TrainingJobStatus"] == "InProgress" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert est.latest_training_job.describe()["TrainingJobStatus"] == "Failed"
    assert _rclones(job_dir) == []
    assert str(job_dir) not in Path("/proc/self/mountinfo").read_text()
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if any(str(job_dir) in part
                                                                  for part in p.info["cmdline"] or [])]
    assert left == []


def test_fastfile_reads_wait_out_an_endpoint_gone_dark(home, s3_proxy, s3, tmp_path, wait_for_line):
    """The endpoint answers nothing but 503 while the script starts reading: its reads block, then go on
    when the endpoint is back, and every byte is right."""
    bucket = s3.bucket("dark")
    body = os.urandom(24 * MB)
    s3.put(f"{bucket}/train/blob.bin", body)
    est = _estimator(input_mode="FastFile", hyperparameters={"hold_seconds": 1})
    est.fit({"train": f"{bucket}/train/"}, wait=False)
    store, name = Store(), est.latest_training_job.name
    wait_for_line(store.log_path(name, "algo-1"), "probe: holding")
    s3_proxy.dark = True
    time.sleep(4)   # the script's reads began 1 s in, and wait
    assert "probe: done" not in store.log_path(name, "algo-1").read_text()
    s3_proxy.dark = False
    est.latest_training_job.wait(logs=False)
    report = _reports(est, tmp_path)["algo-1"]
    assert report["channels"]["train"]["files"]["blob.bin"] == {"size": len(body), "sha256": _sha(body)}


def test_fastfile_on_a_warm_instance(home, tmp_path):
    """A warm instance's job drops its capabilities before anything of the job runs: its first process
    mounts the FastFile channels before that."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.txt").write_text("warm\n")
    est = _estimator(keep_alive_period_in_seconds=60, hang_timeout_seconds=60)
    est.fit({"train": str(data)}, wait=True, logs=False)
    first = est.latest_training_job.name
    est.fit({"train": TrainingInput(str(data), input_mode="FastFile")}, wait=True, logs=False)
    second = est.latest_training_job.name
    assert any(e["message"].startswith(f"reusing warm pool {first}") for e in Store().events(second))
    seen = _reports(est, tmp_path)["algo-1"]["channels"]["train"]
    assert seen["files"] == {"x.txt": {"size": 5, "sha256": _sha(b"warm\n")}}
    assert (seen["mount"]["type"] == "fuse.rclone") == (KIND == "rclone")
    assert seen["write"] == "Read-only file system"
    est.update(keep_alive_period_in_seconds=0)
    assert _rclones(Store().job_dir(second)) == []


def test_pipe_interrupted_mid_epoch_starts_its_epoch_again(home, tmp_path, wait_for_line):
    """A spot interruption while the script is inside epoch 0 of a Pipe channel: the next attempt's
    instance streams epoch 0 again from its first byte, in fresh pipes."""
    data = tmp_path / "data"
    data.mkdir()
    bodies = {f"obj-{i}.bin": os.urandom(256 * 1024 + i) for i in range(4)}
    for key, body in bodies.items():
        (data / key).write_bytes(body)
    est = _estimator(use_spot_instances=True, max_wait=600, checkpoint_s3_uri=f"file://{tmp_path / 'ckpt'}",
                     spot_simulation={"interruptions_at": [3.0]}, interruption_notice_seconds=2,
                     hyperparameters={"hold_seconds": 8, "hold_once": 1, "pipe_epochs": 2})
    est.fit({"train": TrainingInput(str(data), input_mode="Pipe")}, wait=True, logs=False)
    description = est.latest_training_job.describe()
    assert [a["Outcome"] for a in description["Shipyard"]["Attempts"]] == ["Interrupted", "Completed"]
    model = _model(est, tmp_path)
    whole = b"".join(bodies[key] for key in sorted(bodies))
    assert model["algo-1/train_0"] == whole and model["algo-1/train_1"] == whole


def test_pipe_waits_out_an_endpoint_gone_dark(home, s3_proxy, s3, tmp_path, wait_for_line):
    """The endpoint answers nothing but 503 for a while as a Pipe channel streams (the script has read its
    first byte): the stream waits, goes on when the endpoint is back, and the epoch is every byte, in
    order. (Dark for good, the job fails naming the channel and the object, after the storage client's
    own retries: about two minutes, too long for this suite.)"""
    bucket = s3.bucket("darkpipe")
    bodies = {f"train/obj-{i:02d}.bin": os.urandom(10 * MB) for i in range(10)}
    for key, body in bodies.items():
        s3.put(f"{bucket}/{key}", body)
    est = _estimator(input_mode="Pipe", hyperparameters={"hold_seconds": 4, "pipe_epochs": 1})
    est.fit({"train": f"{bucket}/train/"}, wait=False)
    store, name = Store(), est.latest_training_job.name
    wait_for_line(store.log_path(name, "algo-1"), "probe: holding")
    s3_proxy.dark = True
    time.sleep(3)
    sent = sum(s3_proxy.sent.values())
    s3_proxy.dark = False
    est.latest_training_job.wait(logs=False)
    assert sent < sum(map(len, bodies.values()))   # the stream was still going when the endpoint went dark
    assert _model(est, tmp_path)["algo-1/train_0"] == b"".join(bodies[key] for key in sorted(bodies))


def test_pipe_of_an_instance_that_rejoins_starts_again(home, tmp_path, wait_for_line):
    """algo-2 is interrupted while both scripts are inside epoch 0 of a Pipe channel; algo-1 keeps its
    instance and rejoins the replacement: its script starts over, and so does its stream, at epoch 0."""
    import subprocess
    import sys

    data = tmp_path / "data"
    data.mkdir()
    bodies = {f"obj-{i}.bin": os.urandom(256 * 1024 + i) for i in range(4)}
    for key, body in bodies.items():
        (data / key).write_bytes(body)
    est = _estimator(instance_count=2, use_spot_instances=True, max_wait=600, interruption_notice_seconds=2,
                     checkpoint_s3_uri=f"file://{tmp_path / 'ckpt'}",
                     hyperparameters={"hold_seconds": 60, "hold_once": 1, "pipe_epochs": 1})
    est.fit({"train": TrainingInput(str(data), input_mode="Pipe")}, wait=False)
    job = est.latest_training_job
    for host in ("algo-1", "algo-2"):
        wait_for_line(Store().log_path(job.name, host), "probe: holding")
    done = subprocess.run([sys.executable, "-m", "shipyard.cli.main", "spot", "interrupt", job.name, "--host",
                           "algo-2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    description = job.wait(logs=False)
    assert [a["Outcome"] for a in description["Shipyard"]["Attempts"]] == ["Interrupted", "Completed"]
    assert "rejoining with a replaced instance" in Store().log_path(job.name, "algo-1").read_text()
    model = _model(est, tmp_path)
    whole = b"".join(bodies[key] for key in sorted(bodies))
    assert model["algo-1/train_0"] == whole and model["algo-2/train_0"] == whole
