"""Transfers' progress as people read it: one line format (storage.transfer.progress_line) for the host
log and a follower's console, and every kind of transfer reporting it: channels and code downloaded by
the agent, checkpoints restored, the source uploaded at submit (file:// and S3), model uploads."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from shipyard.runtime import agent
from shipyard.runtime.checkpoints import CheckpointSync
from shipyard.runtime.events import EventWriter
from shipyard.storage import transfer
from shipyard.storage.transfer import PROGRESS_LINE, progress_line


@pytest.mark.parametrize(("done", "total", "seconds", "line"), [
    (120_000_000, 300_000_000, 2.5, "download train: 120.0 of 300.0 MB (40%), 48.0 MB/s, 0:00:04 left"),
    (300_000_000, 300_000_000, 6.2, "download train: 300.0 of 300.0 MB (100%), 48.4 MB/s, done in 0:00:06"),
    (0, 314_572_800, 0.0, "download train: 0.0 of 314.6 MB (0%)"),                   # its first report
    (0, 314_572_800, 3.0, "download train: 0.0 of 314.6 MB (0%), 0 bytes/s"),          # stalled: no time left
    (500, 1000, 1.0, "download train: 0.5 of 1.0 kB (50%), 500 bytes/s, 0:00:01 left"),
    (500, 999, 1.0, "download train: 500 of 999 bytes (50%), 500 bytes/s, 0:00:01 left"),
    (2 * 10**12, 5 * 10**12, 200.0, "download train: 2.0 of 5.0 TB (40%), 10.0 GB/s, 0:05:00 left"),
    (5 * 10**9, 5 * 10**9, 4000.0, "download train: 5.0 of 5.0 GB (100%), 1.2 MB/s, done in 1:06:40"),
])
def test_a_progress_line_gives_size_rate_and_time_as_rich_s_columns_do(done, total, seconds, line):
    assert progress_line("download train", done, total, seconds) == line
    assert PROGRESS_LINE.search(f"2026-11-25 12:00:00.000 shipyard-agent INFO {line}")
    assert not PROGRESS_LINE.search("download train 0/314572800")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_agent_reports_a_transfer_at_its_start_every_few_seconds_and_once_done(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(agent.time, "monotonic", clock)
    said: list[str] = []
    host = SimpleNamespace(events=EventWriter(tmp_path / "events.jsonl", "algo-1"), say=said.append)
    progress = agent.TransferProgress(host, "download", "train")
    for done, at in ((0, 100.0), (10_000_000, 101.0), (60_000_000, 102.5), (70_000_000, 103.0),
                     (120_000_000, 105.0), (300_000_000, 105.5)):
        clock.now = at
        progress(done, 300_000_000)
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(e["event"], e["what"], e["channel"], e["done"]) for e in events] == [
        ("progress", "download", "train", d) for d in (0, 60_000_000, 120_000_000, 300_000_000)]
    # The start is an event only (when it began); the log has the lines.
    assert said == ["download train: 60.0 of 300.0 MB (20%), 24.0 MB/s, 0:00:10 left",
                    "download train: 120.0 of 300.0 MB (40%), 24.0 MB/s, 0:00:08 left",
                    "download train: 300.0 of 300.0 MB (100%), 54.5 MB/s, done in 0:00:06"]


def test_nothing_to_fetch_says_nothing(tmp_path):
    said: list[str] = []
    host = SimpleNamespace(events=EventWriter(tmp_path / "events.jsonl", "algo-1"), say=said.append)
    agent.TransferProgress(host, "download", "train")(0, 0)   # every object linked from an earlier attempt
    assert said == [] and not (tmp_path / "events.jsonl").exists()


def test_a_checkpoint_restore_reports_its_progress(tmp_path):
    remote = tmp_path / "remote"
    (remote / "step-1").mkdir(parents=True)
    (remote / "step-1" / "model.pt").write_bytes(b"m" * 5000)
    (remote / "step-1" / ".complete").write_bytes(b"")
    calls: list[tuple[int, int]] = []
    report = CheckpointSync(tmp_path / "local", f"file://{remote}").restore(
        progress=lambda done, total: calls.append((done, total)))
    assert report.files == 2 and calls[0] == (0, 5000) and calls[-1] == (5000, 5000)


@pytest.fixture(params=["file", "s3"])
def destination(request, tmp_path):
    if request.param == "s3":
        return request.getfixturevalue("s3").bucket("out") + "/job/source/sourcedir.tar.gz"
    return f"file://{tmp_path}/out/job/source/sourcedir.tar.gz"


def test_an_upload_reports_its_progress(tmp_path, destination, monkeypatch):
    monkeypatch.setattr(transfer, "CHUNK", 1000)   # several reports from a small file
    local = tmp_path / "sourcedir.tar.gz"
    local.write_bytes(b"x" * 4500)
    calls: list[tuple[int, int]] = []
    transfer.upload_file(local, destination, progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (4500, 4500)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and {t for _, t in calls} <= {0, 4500}
    if destination.startswith("file://"):
        assert len(calls) == 6   # the start, then each chunk


def test_the_source_upload_at_submit_reports_its_progress(tmp_path, monkeypatch):
    from shipyard.control import submit as submitting
    from shipyard.spec.job import JobSpec
    from shipyard.store import Store

    monkeypatch.setattr(submitting, "spawn", lambda store, name, handoff=None: None)
    source = f'"file://{tmp_path}/out/job-1/source/sourcedir.tar.gz"'
    spec = JobSpec(job_name="job-1", output_path=f"file://{tmp_path}/out",
                   hyperparameters={"sagemaker_program": '"t.py"', "sagemaker_submit_directory": source})

    def pack(directory):
        (directory / "sourcedir.tar.gz").write_bytes(b"code" * 100)
        return directory / "sourcedir.tar.gz"

    calls: list[tuple[int, int]] = []
    submitting.submit(Store(tmp_path / "home"), spec, pack, lambda done, total: calls.append((done, total)))
    assert calls[0] == (0, 400) and calls[-1] == (400, 400)
