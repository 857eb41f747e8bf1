"""The hang policy, from heartbeats alone."""

from __future__ import annotations

from shipyard.control.hangs import find_hang


def beat(rank, *, moved, seen, collective, where="train.py:10 in <module>", steps=7):
    return {"host": f"algo-{rank + 1}", "pid": 100 + rank, "rank": rank, "local_rank": 0, "steps": steps,
            "progress_time": moved, "time": seen, "collective": collective, "where": where}


def test_progress_within_the_timeout_is_no_hang():
    beats = [beat(0, moved=95, seen=100, collective=True), beat(1, moved=60, seen=100, collective=False)]
    assert find_hang(beats, now=100, timeout=10) is None
    assert find_hang([], now=100, timeout=10) is None
    assert find_hang(beats, now=1000, timeout=0) is None  # disabled


def test_the_rank_not_waiting_in_a_collective_is_blamed():
    beats = [beat(0, moved=10, seen=99, collective=True),
             beat(1, moved=12, seen=99, collective=False, where="train.py:42 in load_batch"),
             beat(2, moved=11, seen=99, collective=True)]
    reason = find_hang(beats, now=100, timeout=30)
    assert reason.startswith("Hang: no rank made progress for 30 s (last optimizer step 7)")
    assert "rank 1 on algo-2 is not waiting for the others: it is at train.py:42 in load_batch" in reason
    assert "ranks 0, 2 wait in a collective" in reason


def test_a_rank_whose_heartbeat_stopped_is_blamed():
    beats = [beat(0, moved=10, seen=99, collective=True), beat(1, moved=10, seen=20, collective=True)]
    reason = find_hang(beats, now=100, timeout=30)
    assert "rank 1 on algo-2 stopped sending heartbeats 80 s ago" in reason
    assert "rank 0 waits in a collective" in reason
