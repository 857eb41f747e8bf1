"""DeepSpeed under shipyard's torch_distributed launcher (torchrun): `deepspeed.initialize` forms the
process group from torchrun's variables, across 2 instances, with ZeRO sharding of optimizer state and
gradients. Runs on the CPU (DeepSpeed's CPU accelerator over gloo)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from shipyard.pytorch import PyTorch

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed not installed")]


def test_deepspeed_zero_across_two_instances(home, tmp_path):
    stage = 2   # optimizer state and gradients sharded (stage 1 shards the state only: a subset of this)
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(Path(__file__).parent / "scripts" / "deepspeed_train.py", source / "train.py")
    est = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=2, stop_grace_seconds=5,
                  distribution={"torch_distributed": {"enabled": True}},
                  hyperparameters={"zero_stage": stage, "steps": 40})
    est.fit(logs=False)
    path = est.latest_training_job.describe()["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://")
    with tarfile.open(path) as tar:
        ranks = sorted((json.loads(tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()),
                       key=lambda r: r["rank"])
    assert [(r["rank"], r["world"], r["host"], r["local_rank"]) for r in ranks] == [
        (0, 2, "algo-1", 0), (1, 2, "algo-2", 0)]
    assert all(r["zero_stage"] == stage for r in ranks)
    # Data parallel with sharded optimizer state: every rank ends with the same parameters.
    assert ranks[0]["params"] == ranks[1]["params"]
    for r in ranks:
        assert sum(r["losses"][-5:]) < sum(r["losses"][:5]) / 2  # it learned
