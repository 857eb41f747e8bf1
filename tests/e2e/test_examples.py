"""The strategy examples run as documented: examples/strategies/mpi/run.py (the fastest of them; the
other launchers' paths are covered by test_sdk_job, test_tensorflow and test_mpi) submits its job,
trains, and prints where a model is that holds the trained weights."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.sandbox,
              pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpi jobs need OpenMPI (make setup)")]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "strategies"


def test_mpi_example(home, tmp_path):
    torch = pytest.importorskip("torch")
    result = subprocess.run([sys.executable, str(EXAMPLES / "mpi" / "run.py")], env={**os.environ},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    losses = [float(v) for v in re.findall(r"<stdout>:epoch=\d+ loss=([0-9.]+) \(rank 0 of 2", result.stdout)]
    assert len(losses) == 5 and losses[-1] < losses[0] / 5
    model = re.search(r"^model: file://(\S+)$", result.stdout, re.MULTILINE).group(1)
    assert model.startswith(str(home))
    with tarfile.open(model) as tar:
        tar.extractall(tmp_path, filter="data")
    state = torch.load(tmp_path / "model.pth", weights_only=True)
    assert sorted(state) == ["0.bias", "0.weight", "2.bias", "2.weight"]
