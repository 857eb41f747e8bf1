"""A failure reason names the user's exception whatever a framework printed first: a torchrun job whose
failing rank printed absl/glog, torch C++ and NCCL lines (the MPI and TensorFlow cases are in
test_mpi.py and test_tensorflow.py, the excerpt's rules in tests/runtime/test_failure.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from shipyard.errors import UnexpectedStatusError
from shipyard.pytorch import PyTorch
from shipyard.runtime.failure import error_message

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).parent / "scripts"


def test_torchrun_failure_names_the_rank_exception_not_the_noise(home, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(SCRIPTS / "torchrun_fail.py", source / "train.py")
    shutil.copy(SCRIPTS / "framework_noise.py", source)
    est = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=2, instance_type="local",
                  distribution={"torch_distributed": {"enabled": True}}, stop_grace_seconds=5)
    with pytest.raises(UnexpectedStatusError) as failure:
        est.fit(logs=False)
    reason = failure.value.reason
    assert reason.startswith("AlgorithmError: algo-2: ExecuteUserScriptError:\nExitCode 1\n"), reason
    excerpt = error_message(reason).splitlines()
    assert excerpt[0] == "[rank1]: Traceback (most recent call last):", reason
    assert '[rank1]:   File "/opt/ml/code/train.py", line 14, in load_labels' in excerpt
    assert "[rank1]: KeyError: 'label column missing at step 3'" in excerpt
    assert not any(noise in error_message(reason) for noise in ("absl", "NCCL", "oneDNN", "ProcessGroupGloo", "ChildFailedError"))
    assert est.latest_training_job.describe()["FailureReason"] == reason and len(reason) <= 1024
