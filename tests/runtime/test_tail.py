"""Reading files other processes append to: whole lines only, from any starting offset."""

from __future__ import annotations

from shipyard.runtime.tail import FileTail, end_of_last_line


def test_only_complete_lines_are_read_and_the_rest_waits(tmp_path):
    log = tmp_path / "host.log"
    log.write_bytes(b"one\ntw")
    tail = FileTail(log)
    assert tail.read() == ["one"]
    with open(log, "ab") as f:
        f.write(b"o\nthree")
    assert tail.read() == ["two"]
    assert tail.read(final=True) == ["three"]


def test_a_reader_taking_over_starts_after_the_last_complete_line(tmp_path):
    log = tmp_path / "host.log"
    assert end_of_last_line(log) == 0  # not written yet
    log.write_bytes(b"old 1\nold 2\nhalf")
    tail = FileTail(log, end_of_last_line(log))
    with open(log, "ab") as f:
        f.write(b" line\nnew\n")
    assert tail.read() == ["half line", "new"]


def test_a_long_unterminated_tail_starts_at_the_end(tmp_path):
    log = tmp_path / "host.log"
    log.write_bytes(b"x" * 100 + b"\n" + b"y" * 50)
    assert end_of_last_line(log, window=20) == 151  # no line break in the window: the end, not mid-line
    assert end_of_last_line(log, window=60) == 101
