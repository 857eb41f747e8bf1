"""Answers shared between the server's clients: computed once per `ttl`, errors never kept, bounded."""

from __future__ import annotations

import pytest

from shipyard.server.recent import Recent


@pytest.fixture
def clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("shipyard.server.recent.time.monotonic", lambda: now[0])
    return now


def test_clients_asking_within_the_ttl_share_one_read_and_a_later_one_reads_again(clock):
    reads = []
    recent = Recent(1.0)
    read = lambda: reads.append(1) or len(reads)  # noqa: E731
    assert [recent.get("job", read) for _ in range(20)] == [1] * 20
    clock[0] += 0.99
    assert recent.get("job", read) == 1
    clock[0] += 0.02
    assert recent.get("job", read) == 2
    assert recent.get("other", read) == 3   # each question its own answer


def test_an_error_is_not_kept(clock):
    recent = Recent(1.0)

    def fail():
        raise KeyError("no job")

    with pytest.raises(KeyError):
        recent.get("job", fail)
    assert recent.get("job", lambda: "found") == "found"


def test_it_keeps_at_most_size_answers_dropping_the_oldest(clock):
    recent = Recent(60.0, size=4)
    for i in range(4):
        clock[0] += 1
        recent.get(i, lambda i=i: i)
    clock[0] += 1
    recent.get("new", lambda: "new")
    assert sorted(map(str, recent._values)) == ["2", "3", "new"]
