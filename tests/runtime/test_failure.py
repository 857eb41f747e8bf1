"""The failure message's excerpt of the host's log: what went wrong comes first."""

from __future__ import annotations

from shipyard.runtime.failure import error_excerpt

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
