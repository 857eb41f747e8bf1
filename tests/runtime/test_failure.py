"""The failure message's excerpt of the host's log: what went wrong comes first."""

from __future__ import annotations

import runpy
from pathlib import Path

from shipyard.runtime.failure import error_excerpt, error_message, failure_message, only_peer_lost

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


def test_torchrun_rank_traceback_is_the_excerpt(tmp_path):
    """The rank's own traceback, not torchrun's, which says only that a child failed."""
    log = tmp_path / "algo-1.log"
    log.write_text(TORCHRUN_LOG)
    assert error_excerpt(log).splitlines() == TORCHRUN_LOG.splitlines()[1:5]


def test_plain_traceback_unchanged(tmp_path):
    log = tmp_path / "algo-1.log"
    log.write_text("step 1\nTraceback (most recent call last):\n  File \"train.py\", line 2\nValueError: bad\n")
    assert error_excerpt(log) == 'Traceback (most recent call last):\n  File "train.py", line 2\nValueError: bad'


def test_rank_error_without_traceback_leads_once(tmp_path):
    log = tmp_path / "algo-1.log"
    log.write_text("step 1\n[rank0]: ValueError: bad\nexiting\n")
    assert error_excerpt(log) == "[rank0]: ValueError: bad\nstep 1\nexiting"


def test_the_rank_that_failed_for_its_own_reason_leads_and_decides(tmp_path):
    """Two ranks of one host: rank 0 ran out of memory, rank 1 then lost its peer. The excerpt leads with
    rank 0's error, and the message is not one that only says a peer went away."""
    log = tmp_path / "algo-1.log"
    log.write_text(TORCHRUN_LOG.replace("[rank0]: RuntimeError: [pair.cc:553] Connection closed by peer",
                                        "[rank0]: torch.OutOfMemoryError: out of memory\n"
                                        "[rank1]: RuntimeError: [pair.cc:553] Connection closed by peer"))
    excerpt = error_excerpt(log).splitlines()
    assert excerpt[0] == "[rank0]: Traceback (most recent call last):"
    assert excerpt[-1] == "[rank0]: torch.OutOfMemoryError: out of memory"
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


NOISE = runpy.run_path(str(Path(__file__).parents[1] / "e2e" / "scripts" / "framework_noise.py"))["NOISE"]


def test_framework_noise_before_an_exit_message_is_left_out(tmp_path):
    """sys.exit("...") prints no traceback: the excerpt is the script's own last lines, noise or not
    around them, and the message survives FailureReason's cut at 1024 characters."""
    text = NOISE * 3 + "TF_CONFIG task worker\n" + NOISE + "worker failed on purpose\n"
    message = "AlgorithmError: algo-2: " + failure_message(1, ["python", "train.py"], _log(tmp_path, text))
    assert 'ErrorMessage "TF_CONFIG task worker\nworker failed on purpose"' in message[:1024]


def test_a_long_traceback_keeps_the_exception_and_the_frames_that_matter(tmp_path):
    """Deep library frames and framework noise: the exception line comes first, then the user's frames
    and the innermost one; the library frames in between are dropped, and it all fits FailureReason."""
    library = "".join(f'  File "/usr/lib/python3.11/site-packages/tensorflow/layer{i}.py", line {i}, in call\n'
                      f"    return self._inner_function_with_a_long_name(inputs, training=training, mask=mask)\n"
                      for i in range(30))
    text = (NOISE + "Traceback (most recent call last):\n"
            '  File "/opt/ml/code/train.py", line 40, in <module>\n    main()\n'
            '  File "/opt/ml/code/train.py", line 31, in main\n    model.fit(dataset)\n' + library + NOISE +
            '  File "/usr/lib/python3.11/site-packages/keras/trainer.py", line 7, in fit\n    raise ValueError(msg)\n'
            "ValueError: Input 0 of layer dense is incompatible: expected shape (None, 8), got (None, 9)\n")
    message = ("AlgorithmError: algo-1: " + failure_message(1, ["python", "train.py"], _log(tmp_path, text)))[:1024]
    excerpt = error_message(message).splitlines()
    error = "ValueError: Input 0 of layer dense is incompatible: expected shape (None, 8), got (None, 9)"
    assert excerpt[0] == error and excerpt[-1] == error
    assert excerpt[1:3] == ["Traceback (most recent call last):", "  ..."]
    assert excerpt[3:9] == ['  File "/opt/ml/code/train.py", line 40, in <module>', "    main()",
                            '  File "/opt/ml/code/train.py", line 31, in main', "    model.fit(dataset)",
                            '  File "/usr/lib/python3.11/site-packages/keras/trainer.py", line 7, in fit',
                            "    raise ValueError(msg)"]
    assert not any("layer" in line and "File" in line for line in excerpt)


def test_torchrun_ranks_interleaved_with_noise(tmp_path):
    """Two ranks' lines interleaved with torch's C++ warnings: rank 1 failed for its own reason, rank 0
    only lost it; the excerpt is rank 1's traceback alone."""
    text = (NOISE + "[rank0]: Traceback (most recent call last):\n[rank1]: Traceback (most recent call last):\n"
            '[rank1]:   File "/opt/ml/code/train.py", line 12, in <module>\n'
            '[rank0]:   File "/opt/ml/code/train.py", line 9, in <module>\n' + NOISE +
            "[rank1]:     raise KeyError(\"label\")\n[rank0]:     loss.backward()\n"
            "[rank0]: RuntimeError: [pair.cc:553] Connection closed by peer [127.0.1.2]:27860\n"
            "[rank1]: KeyError: 'label'\n" + TORCHRUN_LOG.split("\n", 6)[-1])
    message = failure_message(1, ["torchrun"], _log(tmp_path, text))
    assert error_excerpt(_log(tmp_path, text)).splitlines() == [
        "[rank1]: Traceback (most recent call last):", '[rank1]:   File "/opt/ml/code/train.py", line 12, in <module>',
        '[rank1]:     raise KeyError("label")', "[rank1]: KeyError: 'label'"]
    assert not only_peer_lost(message)


def test_only_noise_is_still_shown(tmp_path):
    """A process that printed nothing but framework logging: that is what there is to show."""
    assert error_excerpt(_log(tmp_path, NOISE)).endswith(NOISE.splitlines()[-1])


def test_an_instance_that_never_wrote_a_log_has_an_empty_excerpt(tmp_path):
    assert error_excerpt(tmp_path / "never-written.log") == ""


SIGNALLED = """\
rank 3 done
Traceback (most recent call last):
  File "/usr/lib/python3.11/runpy.py", line 198, in _run_module_as_main
  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1032, in <module>
    main()
  File "/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
capture_ddp.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-24_15:42:18
  host      : algo-2
  rank      : 2 (local_rank: 0)
  exitcode  : -15 (pid: 7)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 7
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-24_15:42:18
  host      : algo-2
  rank      : 3 (local_rank: 1)
  exitcode  : -6 (pid: 8)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 8
============================================================
"""


def test_a_rank_killed_by_a_signal_leads_with_torchrun_s_root_cause(tmp_path):
    """No rank printed a traceback: torchrun's summary of the rank that failed first comes first, so the
    cut at 1024 characters keeps which rank died and how, not only torchrun's ChildFailedError."""
    message = ("AlgorithmError: algo-2: " + failure_message(1, ["torchrun"], _log(tmp_path, SIGNALLED)))[:1024]
    excerpt = error_message(message).splitlines()
    assert excerpt[:2] == ["Root Cause (first observed failure):", "[0]:"]
    assert "  rank      : 3 (local_rank: 1)" in excerpt and "  traceback : Signal 6 (SIGABRT) received by PID 8" in excerpt
