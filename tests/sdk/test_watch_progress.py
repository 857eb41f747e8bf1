"""What a follower of a job sees of transfers and of hosts of several processes: rich's progress bars on a
terminal, readable lines elsewhere (never `0/314572800 bytes`), and each process's lines labelled as its
host's log has them."""

from __future__ import annotations

import io
import re

from rich.console import Console

from shipyard.sdk.watch import LINE_SECONDS, Transfers, log_console, print_logs, watch
from shipyard.spec.job import JobSpec
from shipyard.store import Store

TOTAL = 314_572_800
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _console(**kwargs) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return log_console(file=out, width=200, **kwargs), out


def test_elsewhere_a_transfer_is_a_line_every_few_seconds_and_once_done():
    console, out = _console()
    with Transfers(console) as transfers:
        for second in range(0, 13):   # a report a second, as the controller passes the agent's on
            transfers.update("algo-1", "download train", second * TOTAL // 20, TOTAL, 1000.0 + second)
        transfers.update("algo-1", "download train", TOTAL, TOTAL, 1020.0)
        transfers.update(None, "upload code", 4000, 4000, 2000.0)
    assert out.getvalue().splitlines() == [
        "algo-1 | download train: 78.6 of 314.6 MB (25%), 15.7 MB/s, 0:00:15 left",
        "algo-1 | download train: 157.3 of 314.6 MB (50%), 15.7 MB/s, 0:00:10 left",
        "algo-1 | download train: 314.6 of 314.6 MB (100%), 15.7 MB/s, done in 0:00:20",
        "upload code: 4.0 of 4.0 kB (100%)",   # this process's own upload: no host; done at its first report
    ]
    assert LINE_SECONDS == 5.0


def test_a_transfer_begun_again_is_timed_from_its_new_start():
    console, out = _console()
    transfers = Transfers(console)
    transfers.update("algo-1", "download train", 0, 1000, 0.0)
    transfers.update("algo-1", "download train", 900, 1000, 1.0)   # then the instance was replaced
    transfers.update("algo-1", "download train", 0, 1000, 50.0)
    transfers.update("algo-1", "download train", 1000, 1000, 52.0)
    assert out.getvalue() == "algo-1 | download train: 1.0 of 1.0 kB (100%), 500 bytes/s, done in 0:00:02\n"


def test_on_a_terminal_transfers_are_progress_bars_below_the_lines_printed():
    console, out = _console(force_terminal=True)
    with Transfers(console) as transfers:
        transfers.update("algo-1", "download train", 0, TOTAL, 1000.0)
        transfers.update("algo-1", "download train", 100_000_000, TOTAL, 1002.0)
        transfers.update("algo-1", "download train", 150_000_000, TOTAL, 1003.0)
        console.print("algo-1 | a log line")
        transfers.update("algo-2", "restore checkpoints", 1_000_000, 2_000_000, 1003.0)
        bars = transfers.bars
        assert bars is not None and len(bars.tasks) == 2
        shown = bars.tasks[0]
        assert shown.completed == 150_000_000 and shown.speed == 50_000_000   # over the reports' own times
        transfers.update("algo-1", "download train", TOTAL, TOTAL, 1006.0)
        assert len(bars.tasks) == 1   # a finished transfer's bar goes; its line stays
    assert transfers.bars is None
    text = ANSI.sub("", out.getvalue())
    assert "━" in text and "150.0/314.6 MB" in text and "50.0 MB/s" in text   # the bar, as DownloadColumn says
    assert "algo-1 | a log line" in text
    assert "algo-1 | download train: 314.6 of 314.6 MB (100%), 52.4 MB/s, done in 0:00:06" in text
    assert "restore checkpoints" in text


def test_a_quiet_console_shows_nothing():
    console, out = _console(force_terminal=True, quiet=True)
    with Transfers(console) as transfers:
        transfers.update("algo-1", "download train", 1, 2, 0.0)
        transfers.update("algo-1", "download train", 2, 2, 1.0)
    assert out.getvalue() == ""


def _job(tmp_path, hosts: int = 1) -> Store:
    store = Store(tmp_path)
    store.create_job(JobSpec(job_name="job-1", output_path="file:///out", instance_count=hosts,
                             hyperparameters={"sagemaker_program": '"t.py"'}))
    return store


def test_following_a_job_shows_progress_readably_and_each_process_s_lines_labelled(tmp_path):
    store = _job(tmp_path)
    for done in (0, 104_857_600, TOTAL):
        store.add_event("job-1", "progress", f"download train {done}/{TOTAL}", "algo-1")
    log = store.log_path("job-1", "algo-1")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(
        "2026-11-25 12:00:01.000 shipyard-agent INFO download train: 104.9 of 314.6 MB (33%), 52.4 MB/s, "
        "0:00:04 left\n"
        f"2026-11-25 12:00:03.000 shipyard-agent INFO channel train: 1 objects, {TOTAL} bytes fetched from "
        "s3://data/train (FullyReplicated) in 3.00s\n"
        "algo-1[0] | hello from rank 0\nalgo-1[1] | [notes] from rank 1\ntorchrun's own line\n")
    store.transition("job-1", "Stopped", "Stopped", "Stop requested")
    console, out = _console()
    watch(store, "job-1", console=console)
    lines = out.getvalue().splitlines()
    assert "algo-1 | download train: 314.6 of 314.6 MB (100%)" in [line.split(",")[0] for line in lines]
    assert not any("/314572800" in line or "download train: 104.9" in line for line in lines)   # no raw counts,
    # and the agent's own progress lines are left out where the progress is shown from the events
    assert "algo-1[0] | hello from rank 0" in lines and "algo-1[1] | [notes] from rank 1" in lines
    assert "algo-1 | torchrun's own line" in lines
    assert any(line.startswith("algo-1 | 2026-11-25 12:00:03.000 shipyard-agent INFO channel train") for line in lines)

    console, out = _console()
    print_logs(store, "job-1", console=console)   # `shipyard jobs logs`: every line of the log, labelled
    assert out.getvalue().splitlines()[0].startswith("algo-1 | 2026-11-25 12:00:01.000 shipyard-agent INFO download")
    assert "algo-1[1] | [notes] from rank 1" in out.getvalue().splitlines()


def test_following_a_job_on_a_terminal_shows_its_transfers_as_bars(tmp_path):
    store = _job(tmp_path)
    store.add_event("job-1", "progress", f"download train 0/{TOTAL}", "algo-1")
    store.add_event("job-1", "progress", f"download train 104857600/{TOTAL}", "algo-1")
    store.transition("job-1", "Stopped", "Stopped", "Stop requested")   # it never finished: its bar until the end
    console, out = _console(force_terminal=True)
    watch(store, "job-1", show_logs=False, console=console)
    text = ANSI.sub("", out.getvalue())
    assert "━" in text and "algo-1 download train" in text and "104.9/314.6 MB" in text
    assert "0/314572800" not in text and "bytes" not in text
