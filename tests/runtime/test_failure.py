"""The failure message's excerpt of the host's log: what went wrong comes first."""

from __future__ import annotations

from shipyard.runtime.failure import error_excerpt, failure_message, only_peer_lost

TORCHRUN_LOG = """\
step 3
[rank0]: Traceback (most recent call last):
[rank0]:   File "/opt/ml/code/train.py", line 9, in <module>
[rank0]:     loss.backward()
[rank0]: RuntimeError: [pair.cc:553] Connection closed by peer [127.0.1.2]:27860
E1123 23:54:05 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: 1) local_rank: 0
Traceback (most recent call last):
  File "torch/distributed/run.py", line 1032, in <module>
    main()
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
train.py FAILED
"""


def test_torchrun_rank_error_leads_the_excerpt(tmp_path):
    log = tmp_path / "algo-1.log"
    log.write_text(TORCHRUN_LOG)
    excerpt = error_excerpt(log).splitlines()
    assert excerpt[0] == "[rank0]: RuntimeError: [pair.cc:553] Connection closed by peer [127.0.1.2]:27860"
    assert excerpt[1:] == TORCHRUN_LOG.splitlines()[6:]  # then torchrun's own traceback, as before


def test_plain_traceback_unchanged(tmp_path):
    log = tmp_path / "algo-1.log"
    log.write_text("step 1\nTraceback (most recent call last):\n  File \"train.py\", line 2\nValueError: bad\n")
    assert error_excerpt(log) == 'Traceback (most recent call last):\n  File "train.py", line 2\nValueError: bad'


def test_rank_error_among_the_last_lines_is_not_repeated(tmp_path):
    log = tmp_path / "algo-1.log"
    log.write_text("step 1\n[rank0]: ValueError: bad\nexiting\n")
    assert error_excerpt(log) == "step 1\n[rank0]: ValueError: bad\nexiting"


def test_the_rank_that_failed_for_its_own_reason_leads_and_decides(tmp_path):
    """Two ranks of one host: rank 0 ran out of memory, rank 1 then lost its peer. The excerpt leads with
    rank 0's error, and the message is not one that only says a peer went away."""
    log = tmp_path / "algo-1.log"
    log.write_text(TORCHRUN_LOG.replace("[rank0]: RuntimeError: [pair.cc:553] Connection closed by peer",
                                        "[rank0]: torch.OutOfMemoryError: out of memory\n"
                                        "[rank1]: RuntimeError: [pair.cc:553] Connection closed by peer"))
    excerpt = error_excerpt(log)
    assert excerpt.startswith("[rank0]: torch.OutOfMemoryError: out of memory\n")
    assert not only_peer_lost(failure_message(1, ["torchrun"], log))
    assert only_peer_lost(failure_message(1, ["torchrun"], _log(tmp_path, TORCHRUN_LOG)))
    assert only_peer_lost("AlgorithmError: algo-1: " + failure_message(1, ["torchrun"], _log(tmp_path, TORCHRUN_LOG)))


def test_a_peer_message_elsewhere_in_the_log_does_not_count(tmp_path):
    text = "step 1\nbotocore: Connection reset by peer, retrying\nValueError: bad\n"  # all in the excerpt
    assert not only_peer_lost(failure_message(1, ["python"], _log(tmp_path, text)))


def _log(tmp_path, text: str):
    log = tmp_path / "other.log"
    log.write_text(text)
    return log
