"""End to end through the SDK: a 2-instance job with distribution={'smdistributed': {'modelparallel':
...}} runs examples/parallel/src/train.py, whose shipyard.parallel applies the strategies named in the
job (FSDP across both instances, gradient accumulation) and checkpoints through checkpoint_s3_uri; a
second job with the same URI (and torch_distributed enabled as well) resumes from the last complete
checkpoint, not from step 0."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from shipyard.contract.layout import MARKER
from shipyard.pytorch import PyTorch

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]  # /opt/ml/checkpoints needs the sandbox
SOURCE = Path(__file__).resolve().parents[2] / "examples" / "parallel" / "src"
PARAMETERS = {"hybrid_shard_degree": 2, "gradient_accumulation_steps": 2}


def _run(tmp_path: Path, steps: int, **distribution) -> list[dict]:
    estimator = PyTorch(
        entry_point="train.py", source_dir=str(SOURCE), instance_count=2, instance_type="local",
        distribution={"smdistributed": {"modelparallel": {"enabled": True, "parameters": PARAMETERS}},
                      **distribution},
        hyperparameters={"steps": steps}, checkpoint_s3_uri=f"file://{tmp_path / 'ckpt'}", base_job_name="sp",
    )
    estimator.fit(wait=True, logs="None")
    assert estimator.latest_training_job.describe()["TrainingJobStatus"] == "Completed"
    with tarfile.open(estimator.model_data.removeprefix("file://")) as tar:
        return sorted((json.load(tar.extractfile(m)) for m in tar.getmembers() if m.isfile()),
                      key=lambda summary: summary["rank"])


def test_smdistributed_job_runs_the_configured_strategies_and_resumes(home, tmp_path):
    first = _run(tmp_path, steps=4)
    assert [s["rank"] for s in first] == [0, 1]
    for summary in first:
        assert summary["world_size"] == 2 and summary["resumed_from"] == 0 and summary["steps"] == 4
        assert summary["strategies"] == ["fsdp", "gradient_accumulation"]
        assert summary["layout"] == {"dp": 2, "pp": 1, "tp": 1}
    step_dir = tmp_path / "ckpt" / "step-4"
    assert (step_dir / MARKER).exists() and (step_dir / ".metadata").exists()
    assert {p.name for p in step_dir.glob("*.distcp")} == {"__0_0.distcp", "__1_0.distcp"}  # a shard per rank

    # torch_distributed too: torchrun launches it (SMP v2's way), and the library still reads mp_parameters
    second = _run(tmp_path, steps=6, torch_distributed={"enabled": True})
    assert [(s["resumed_from"], s["steps"]) for s in second] == [(4, 6), (4, 6)]
    assert all(s["strategies"] == ["fsdp", "gradient_accumulation"] for s in second)
