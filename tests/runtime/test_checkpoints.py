"""Checkpoint restore and sync against a file:// remote and moto's S3 server."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from shipyard.runtime.checkpoints import MARKER, CheckpointSync
from shipyard.storage import transfer
from shipyard.storage.uri import exists, filesystem, join


class Remote:
    def __init__(self, uri: str) -> None:
        self.uri = uri

    def keys(self) -> set[str]:
        return set(transfer.list_objects(self.uri)) if exists(self.uri) else set()

    def read(self, rel: str) -> bytes:
        fs, path = filesystem(join(self.uri, rel))
        return fs.cat_file(path)

    def put(self, rel: str, data: bytes) -> None:
        fs, path = filesystem(join(self.uri, rel))
        if fs.protocol == "file" or "file" in fs.protocol:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        fs.pipe_file(path, data)


@pytest.fixture(params=["file", "s3"])
def remote(request, tmp_path) -> Remote:
    if request.param == "file":
        return Remote(f"file://{tmp_path / 'remote' / 'ckpt'}")
    s3 = request.getfixturevalue("s3")
    return Remote(s3.bucket("ckpts") + "/job-1/checkpoints")


class Events(list):
    def __call__(self, event: str, fields: dict) -> None:
        self.append((event, fields))

    def named(self, event: str) -> list[dict]:
        return [f for e, f in list(self) if e == event]


def wait_for(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# -- restore ---------------------------------------------------------------------------------------


def test_restore_into_empty_dir(remote, tmp_path):
    remote.put("a.pt", b"A" * 10)
    remote.put("sub/b.pt", b"B" * 5)
    local = tmp_path / "local"
    report = CheckpointSync(local, remote.uri).restore()
    assert (report.files, report.bytes, report.skipped_incomplete) == (2, 15, ())
    assert report.checkpoint in {"a.pt", "sub/b.pt"}
    assert (local / "a.pt").read_bytes() == b"A" * 10
    assert (local / "sub" / "b.pt").read_bytes() == b"B" * 5
    assert sorted(p.name for p in local.rglob("*")) == ["a.pt", "b.pt", "sub"]  # no temp files left


def test_restore_names_newest_file(tmp_path):
    root = tmp_path / "remote"
    write(root / "z-old.pt", b"1")
    write(root / "a-new.pt", b"2")
    os.utime(root / "z-old.pt", (1_000_000, 1_000_000))
    assert CheckpointSync(tmp_path / "local", f"file://{root}").restore().checkpoint == "a-new.pt"


def test_restore_of_missing_uri_is_empty(tmp_path):
    report = CheckpointSync(tmp_path / "local", f"file://{tmp_path / 'nothing'}").restore()
    assert (report.files, report.bytes, report.checkpoint, report.skipped_incomplete) == (0, 0, None, ())


def test_restore_skips_checkpoint_dir_without_marker(remote, tmp_path):
    remote.put("rank0/meta.json", b"{}")  # beside marked dirs: restored
    remote.put(f"rank0/step-3/{MARKER}", b"")
    remote.put("rank0/step-3/model.pt", b"3")
    remote.put("rank0/step-4/model.pt", b"half")
    remote.put("step-9/model.pt", b"9")
    remote.put(f"step-9/{MARKER}", b"")
    remote.put("step-10/model.pt", b"10")
    remote.put("step-10/optim/0.pt", b"o")
    remote.put(f"step-10/{MARKER}", b"")
    remote.put("step-11/model.pt", b"half")  # the newest, interrupted before its marker
    remote.put("rank1/step-12/model.pt", b"half")  # nested, no marked dir anywhere under rank1
    remote.put("notes.txt", b"top level")
    local = tmp_path / "local"
    report = CheckpointSync(local, remote.uri).restore()
    assert report.skipped_incomplete == ("rank0/step-4", "rank1", "step-11")
    assert report.checkpoint == "step-10"
    restored = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    assert restored == sorted([
        "notes.txt", "rank0/meta.json", f"rank0/step-3/{MARKER}", "rank0/step-3/model.pt",
        f"step-10/{MARKER}", "step-10/model.pt", "step-10/optim/0.pt", f"step-9/{MARKER}", "step-9/model.pt",
    ])
    assert report.files == len(restored)


def test_restore_names_newest_marked_dir_by_time(tmp_path):
    root = tmp_path / "remote"
    for name in ("step-2", "step-1"):
        write(root / name / "m.pt", b"x")
        write(root / name / MARKER, b"")
    os.utime(root / "step-2" / MARKER, (1_000_000, 1_000_000))
    assert CheckpointSync(tmp_path / "local", f"file://{root}").restore().checkpoint == "step-1"


# -- continuous sync -------------------------------------------------------------------------------


def test_new_file_uploaded_then_changed_file_reuploaded(remote, tmp_path):
    local, events = tmp_path / "local", Events()
    sync = CheckpointSync(local, remote.uri, interval=0.1, on_event=events)
    sync.restore()
    sync.start()
    try:
        write(local / "model.pt", b"v1")
        wait_for(lambda: events.named("checkpoint_uploaded"))
        assert events.named("checkpoint_uploaded") == [{"path": "model.pt", "bytes": 2}]
        assert remote.read("model.pt") == b"v1"
        write(local / "model.pt", b"version 2")
        wait_for(lambda: remote.read("model.pt") == b"version 2")
    finally:
        sync.stop()
    assert sync.healthy


def test_deletion_propagates_but_unseen_remote_files_stay(remote, tmp_path):
    remote.put("restored.pt", b"r")
    remote.put("kept.pt", b"k")
    local, events = tmp_path / "local", Events()
    sync = CheckpointSync(local, remote.uri, interval=0.1, on_event=events)
    sync.restore()
    (local / "restored.pt").unlink()  # before the sync ever scanned: known from the restore
    remote.put("other-host.pt", b"o")  # written by another instance after our restore
    sync.start()
    try:
        write(local / "mine.pt", b"m")
        wait_for(lambda: "mine.pt" in remote.keys())
        (local / "mine.pt").unlink()
        wait_for(lambda: remote.keys() == {"other-host.pt", "kept.pt"})
        time.sleep(0.3)  # a few more rounds: still there
        assert remote.keys() == {"other-host.pt", "kept.pt"}
    finally:
        sync.stop()
    assert [e["path"] for e in events.named("checkpoint_uploaded")] == ["mine.pt"]  # restored: not re-sent


def test_growing_file_waits_until_stable_and_flush_takes_it(tmp_path):
    remote = Remote(f"file://{tmp_path / 'remote'}")
    local = tmp_path / "local"
    sync = CheckpointSync(local, remote.uri)
    write(local / "stable.pt", b"s")
    write(local / "growing.pt", b"g" * 10)
    sync.sync_once()
    assert remote.keys() == set()  # first sight: not yet known to be stable
    with open(local / "growing.pt", "ab") as f:
        f.write(b"g" * 10)
    sync.sync_once()
    assert remote.keys() == {"stable.pt"}
    with open(local / "growing.pt", "ab") as f:
        f.write(b"g" * 10)
    sync.sync_once()
    assert remote.keys() == {"stable.pt"}
    with open(local / "growing.pt", "ab") as f:
        f.write(b"g" * 10)
    assert sync.flush(timeout=30)
    assert remote.read("growing.pt") == b"g" * 40


def test_file_replaced_faster_than_the_interval_is_not_starved(remote, tmp_path):
    """A script that renames a new checkpoint over the old one more often than the sync scans: its file
    is never stable across two scans, yet a whole version of it is uploaded after STARVED_SCANS."""
    local = tmp_path / "local"
    sync = CheckpointSync(local, remote.uri)

    def replace(step: int) -> None:
        write(local / "state.tmp", str(step).encode() * 1000)
        os.replace(local / "state.tmp", local / "state.json")

    replace(1)
    sync.sync_once()
    replace(2)
    sync.sync_once()
    assert remote.keys() == set()  # first sight, then replaced once: might be a one-off
    replace(3)
    sync.sync_once()
    assert remote.keys() == {"state.json"} and remote.read("state.json") == b"3" * 1000
    replace(4)
    sync.sync_once()
    assert remote.read("state.json") == b"4" * 1000  # and from then on every round


def test_file_replaced_twice_per_scan_is_not_starved(remote, tmp_path):
    """Replaced twice between scans, on ext4 the file has the same inode number at every scan (the
    number freed by one replace is given to the next new file); the sync still sees it replaced."""
    local = tmp_path / "local"
    sync = CheckpointSync(local, remote.uri)

    def replace(step: int) -> None:
        write(local / "state.tmp", str(step).encode() * 1000)
        os.replace(local / "state.tmp", local / "state.json")

    try:
        for step in range(1, 9, 2):
            replace(step)
            replace(step + 1)
            sync.sync_once()
        assert remote.read("state.json") == b"8" * 1000
    finally:
        sync.stop()


def test_last_files_go_up_after_the_others_and_not_after_a_failure(tmp_path):
    """The debugger's index files (`last`): after every other file of the round, in name order; none
    while an upload before them failed, so the remote never has an index naming a missing file."""
    local, remote, events = tmp_path / "local", tmp_path / "remote", Events()
    sync = CheckpointSync(local, f"file://{remote}", on_event=events,
                          last=lambda rel: rel[6:9] if rel.startswith("index/") else None)
    for step in (10, 9):
        write(local / "tensors" / f"{step:03d}.npz", b"t" * step)
        for worker in (0, 1):
            write(local / "index" / f"{step:03d}_{worker}.json", b"{}")
    (remote / "tensors" / "010.npz").mkdir(parents=True)  # a file cannot be uploaded over a directory
    sync.sync_once()
    sync.sync_once()
    uploaded = [f["path"] for f in events.named("checkpoint_uploaded")]
    assert uploaded == ["tensors/009.npz"]  # 010.npz failed: no index, not even 009's, goes up
    (remote / "tensors" / "010.npz").rmdir()
    assert sync.flush(timeout=30)
    uploaded = [f["path"] for f in events.named("checkpoint_uploaded")]
    assert uploaded[:2] == ["tensors/009.npz", "tensors/010.npz"]
    # a step's files together (in parallel, any order), then the next step's
    assert [set(uploaded[2:4]), set(uploaded[4:])] == [{"index/009_0.json", "index/009_1.json"},
                                                       {"index/010_0.json", "index/010_1.json"}]


def test_finish_keeps_its_timeout_when_an_upload_hangs(tmp_path, monkeypatch):
    """The agent's final sync is bounded: a round stuck in an upload does not hold finish() (nor stop())
    past the timeout."""
    gate = threading.Event()
    monkeypatch.setattr(transfer, "upload_file", lambda *args, **kwargs: gate.wait(60))
    sync = CheckpointSync(tmp_path / "local", f"file://{tmp_path / 'remote'}")
    write(tmp_path / "local" / "model.pt", b"x")
    done: list[bool] = []
    finisher = threading.Thread(target=lambda: done.append(sync.finish(timeout=0.2)))
    finisher.start()
    finisher.join(20)
    stuck = finisher.is_alive()
    gate.set()
    assert not stuck and done == [False]


def test_marker_uploaded_after_its_files(remote, tmp_path):
    local, seen = tmp_path / "local", []

    def on_event(event: str, fields: dict) -> None:
        if event == "checkpoint_uploaded":
            seen.append((fields["path"], remote.keys()))

    sync = CheckpointSync(local, remote.uri, on_event=on_event)
    for i in range(5):
        write(local / "step-1" / f"shard-{i}.pt", b"x" * (i + 1))
    write(local / "step-1" / "growing.pt", b"g")
    write(local / "step-1" / MARKER, b"")
    sync.sync_once()
    with open(local / "step-1" / "growing.pt", "ab") as f:
        f.write(b"more")
    sync.sync_once()  # the shards go up; growing.pt does not, so neither does the marker
    assert f"step-1/{MARKER}" not in remote.keys()
    assert {f"step-1/shard-{i}.pt" for i in range(5)} <= remote.keys()
    sync.sync_once()
    files = {f"step-1/shard-{i}.pt" for i in range(5)} | {"step-1/growing.pt"}
    assert remote.keys() == files | {f"step-1/{MARKER}"}
    for path, remote_then in seen:
        if path.endswith(MARKER):
            assert files <= remote_then  # every file was there before the marker
        else:
            assert f"step-1/{MARKER}" not in remote_then


def test_marker_never_uploaded_when_a_file_fails(tmp_path, monkeypatch):
    remote = Remote(f"file://{tmp_path / 'remote'}")
    local = tmp_path / "local"
    real = transfer.upload_file

    def flaky(path: Path, uri: str) -> None:
        if path.name == "bad.pt":
            raise OSError("disk on fire")
        real(path, uri)

    monkeypatch.setattr(transfer, "upload_file", flaky)
    write(local / "ck" / "good.pt", b"1")
    write(local / "ck" / "bad.pt", b"2")
    write(local / "ck" / MARKER, b"")
    sync = CheckpointSync(local, remote.uri)
    assert not sync.flush(timeout=30)
    assert remote.keys() == {"ck/good.pt"}
    monkeypatch.setattr(transfer, "upload_file", real)
    assert sync.flush(timeout=30)
    assert remote.keys() == {"ck/good.pt", "ck/bad.pt", f"ck/{MARKER}"}


def test_rewriting_a_marked_dir_removes_remote_marker_first(tmp_path):
    remote = Remote(f"file://{tmp_path / 'remote'}")
    local, marker_then = tmp_path / "local", []

    def on_event(event: str, fields: dict) -> None:
        if event == "checkpoint_uploaded" and fields["path"] == "latest/model.pt":
            marker_then.append(f"latest/{MARKER}" in remote.keys())

    sync = CheckpointSync(local, remote.uri, on_event=on_event)
    write(local / "latest" / "model.pt", b"v1")
    write(local / "latest" / MARKER, b"")
    assert sync.flush(timeout=30)
    write(local / "latest" / "model.pt", b"version 2")
    assert sync.flush(timeout=30)
    assert marker_then == [False, False]  # the old marker was gone before the new file went up
    assert remote.read("latest/model.pt") == b"version 2"
    assert f"latest/{MARKER}" in remote.keys()  # and is back after it
    write(local / "latest" / "extra.pt", b"e")
    assert sync.flush(timeout=30)
    (local / "latest" / "extra.pt").unlink()
    assert sync.flush(timeout=30)  # one round: marker off, file deleted, marker back
    assert remote.keys() == {"latest/model.pt", f"latest/{MARKER}"}


def test_rotation_keeps_old_checkpoint_until_new_one_is_complete(remote, tmp_path):
    local = tmp_path / "local"
    sync = CheckpointSync(local, remote.uri)
    write(local / "step-1" / "m.pt", b"1")
    write(local / "step-1" / MARKER, b"")
    assert sync.flush(timeout=30)
    write(local / "step-2" / "m.pt", b"2")
    write(local / "step-2" / MARKER, b"")
    for p in (local / "step-1").iterdir():
        p.unlink()
    sync.sync_once()  # step-2 not stable yet: step-1 must stay complete remotely
    assert {"step-1/m.pt", f"step-1/{MARKER}"} <= remote.keys()
    sync.sync_once()
    assert remote.keys() == {"step-2/m.pt", f"step-2/{MARKER}"}


def test_flush_uploads_everything(remote, tmp_path):
    local = tmp_path / "local"
    sync = CheckpointSync(local, remote.uri, interval=60)
    sync.start()
    try:
        expected = {f"rank-{r}/step-{s}.pt": os.urandom(100 + r + s) for r in range(3) for s in range(4)}
        expected |= {"ckpt/a.bin": b"a" * 1000, f"ckpt/{MARKER}": b""}
        for rel, data in expected.items():
            write(local / rel, data)
        assert sync.flush(timeout=30)
    finally:
        sync.stop()
    assert remote.keys() == set(expected)
    assert all(remote.read(rel) == data for rel, data in expected.items())


# -- failures --------------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_endpoint_down_then_back(s3, s3_server, tmp_path, monkeypatch):
    import s3fs

    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # fail fast while the endpoint is down
    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)
    remote = Remote(s3.bucket("ckpts") + "/job")
    local, events = tmp_path / "local", Events()
    sync = CheckpointSync(local, remote.uri, interval=0.1, on_event=events, max_failures=2)
    sync.start()
    try:
        write(local / "a.pt", b"a")
        wait_for(lambda: "a.pt" in remote.keys())
        monkeypatch.setenv("SHIPYARD_S3_ENDPOINT_URL", f"http://127.0.0.1:{closed_port()}")
        write(local / "b.pt", b"b")
        write(local / "ck" / "c.pt", b"c")
        write(local / "ck" / MARKER, b"")
        wait_for(lambda: events.named("checkpoint_sync_failed"))
        assert not sync.healthy
        assert not sync.flush(timeout=10)
        failed = events.named("checkpoint_sync_failed")
        assert len(failed) == 1 and failed[0]["failures"] == 2 and failed[0]["error"]
        assert not events.named("checkpoint_sync_recovered")
        monkeypatch.setenv("SHIPYARD_S3_ENDPOINT_URL", s3_server)
        wait_for(lambda: events.named("checkpoint_sync_recovered"))
        wait_for(lambda: remote.keys() == {"a.pt", "b.pt", "ck/c.pt", f"ck/{MARKER}"})
        assert sync.healthy
        assert len(events.named("checkpoint_sync_failed")) == 1
    finally:
        sync.stop()
    assert not [t for t in threading.enumerate() if t.name == "checkpoint-sync"]
