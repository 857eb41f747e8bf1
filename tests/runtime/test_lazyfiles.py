"""FastFile's lazy files (runtime/lazyfiles.py) against the real kernel: each scenario of lazy_scenarios.py in
a process of its own, reading a watched read-only view while the listener fetches from a counting source."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from shipyard.runtime import lazyfiles

PROBLEM = lazyfiles.problem(Path(tempfile.gettempdir()))
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=f"lazy files cannot serve here: {PROBLEM}")
CHUNK = 64 * 1024   # lazy_scenarios.CHUNK


def scenario(name: str, tmp_path: Path) -> dict:
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("lazy_scenarios.py")), name, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_bytes_come_on_first_read_with_read_ahead_and_then_from_the_disk_alone(tmp_path):
    seen = scenario("lazily", tmp_path)
    assert seen["listing"] == sorted(["big.bin", "empty", "nested/deep/x.txt", *(f"small-{i}.bin" for i in range(12))])
    # 4 KiB read from chunk 3 of 11: that chunk and AHEAD after it, nothing before, not the whole object
    assert seen["partial_ok"]
    assert seen["after_partial"] == list(range(3, 3 + 1 + lazyfiles.AHEAD))
    assert seen["big_blocks"] <= (1 + lazyfiles.AHEAD) * CHUNK < seen["big_size"]
    assert seen["first_epoch_ok"] and seen["mmap_ok"]
    assert seen["reads_per_chunk"] == 1   # read-ahead, prefetch and reads never fetch a chunk twice
    # once complete, a file is the disk's: the second epoch asks the listener nothing
    assert seen["second_epoch_ok"] and seen["asked_in_second_epoch"] == 0
    assert seen["write"] == "Read-only file system"
    assert seen["errors"] == []


def test_reads_wait_while_the_source_fails_and_go_on_when_it_is_back(tmp_path):
    seen = scenario("dark_then_back", tmp_path)
    assert seen == {"ok": True, "errors": [], "tries": seen["tries"]} and seen["tries"] >= 4


def test_a_source_that_stays_dark_fails_the_read_with_eio_naming_channel_and_object(tmp_path):
    seen = scenario("dark", tmp_path)
    assert seen["errno"] == "EIO"
    [error] = seen["errors"]
    assert error.startswith(f"channel train: object file://{tmp_path}/source/blob.bin: "
                            "OSError: [Errno 16] Service Unavailable")
    assert "reads of it fail with EIO" in error


def test_an_object_shorter_than_listed_is_never_shown(tmp_path):
    seen = scenario("changed", tmp_path)
    assert seen["errno"] == "EIO"
    assert "changed since it was listed" in seen["errors"][0]


@pytest.mark.parametrize("how, error", [("deleted", "FileNotFoundError"), ("replaced", "FileExpired"),
                                        ("replaced-s3lite", "ObjectChanged")])
def test_an_object_deleted_or_replaced_since_the_listing_fails_its_read_at_once(how, error, tmp_path):
    seen = scenario(how, tmp_path)
    assert seen["errno"] == "EIO" and seen["seconds"] < lazyfiles.RETRY_SECONDS / 2
    [message] = seen["errors"]
    assert message.startswith(f"channel train: object file://{tmp_path}/source/blob.bin: {error}")


def test_the_cache_keeps_its_bound_and_an_evicted_file_is_fetched_again(tmp_path):
    seen = scenario("bounded", tmp_path)
    assert seen["first_ok"] and seen["errors"] == []
    assert seen["emptied"] == ["part-0.bin", "part-1.bin", "part-2.bin"]   # 2 x 2 chunks kept of 5 x 2
    assert seen["held_ok"]   # a reader that had it open reads the whole file it opened
    assert seen["again_ok"] and seen["fetched_again"] == 2 and seen["scratch"] == []
