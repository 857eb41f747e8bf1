"""The distribution strategies the README claims, each run as a real 2-instance job from the SDK:
`pytorchddp`, `smdistributed` dataparallel, and `smdistributed` modelparallel with tensor and pipeline
parallelism, ZeRO-1, fp16, bf16, activation checkpointing and offloading (several per job where they
combine). The job's script (scripts/parallel_train.py) records on every rank what its launcher gave it
and what the strategies did (tests/parallel/evidence.py); the test reads that back from model.tar.gz and
holds it to what each strategy must leave (tests/parallel/applied.py), and the loss must have gone down."""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

from shipyard.pytorch import PyTorch
from shipyard.store import Store

PARALLEL = Path(__file__).parents[1] / "parallel"
sys.path.insert(0, str(PARALLEL))
pytest.register_assert_rewrite("applied")  # its failures show the values compared
from applied import assert_applied  # noqa: E402

pytestmark = pytest.mark.slow
STEPS = 30


def _modelparallel(parameters: dict) -> dict:
    return {"smdistributed": {"modelparallel": {"enabled": True, "parameters": parameters}}}


MODELPARALLEL = {
    "tensor_parallel_fp16_offloading": {"tensor_parallel_degree": 2, "fp16": True, "sm_activation_offloading": True},
    "pipeline_bf16_checkpointing": {"pipeline_parallel_degree": 2, "microbatches": 2, "bf16": True,
                                    "activation_checkpointing": True},
    "zero1": {"shard_optimizer_state": True},
}
# name -> (distribution, the mp_parameters the script's prepare() sees, the launcher that must run it)
JOBS = {
    "pytorchddp": ({"pytorchddp": {"enabled": True}}, {}, "pytorchddp"),
    "smdistributed_dataparallel": ({"smdistributed": {"dataparallel": {"enabled": True}}}, {}, "smdistributed"),
    **{name: (_modelparallel(parameters), parameters, "smdistributed") for name, parameters in MODELPARALLEL.items()},
}


@pytest.mark.parametrize("name", list(JOBS))
def test_strategy_job_applies_it_on_every_rank(home, tmp_path, name):
    distribution, parameters, launcher = JOBS[name]
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(Path(__file__).parent / "scripts" / "parallel_train.py", source / "train.py")
    for helper in ("evidence.py", "parallel_scenarios.py"):
        shutil.copy(PARALLEL / helper, source)
    estimator = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=2, instance_type="local",
                        distribution=distribution, hyperparameters={"steps": STEPS}, base_job_name="parallel")
    estimator.fit(logs=False)
    job = estimator.latest_training_job
    assert job.describe()["TrainingJobStatus"] == "Completed"
    events = [json.loads(line) for log in (Store(home).job_dir(job.name) / "events").glob("*.jsonl")
              for line in log.read_text().splitlines()]
    assert sorted((e["host"], e["launcher"]) for e in events if e.get("phase") == "Training") == [
        ("algo-1", launcher), ("algo-2", launcher)]

    with tarfile.open(estimator.model_data.removeprefix("file://")) as tar:
        reports = sorted((json.load(tar.extractfile(m)) for m in tar.getmembers() if m.isfile()),
                         key=lambda report: report["rank"])
    assert [(r["rank"], r["world_size"], r["host"], r["torchrun"]) for r in reports] == [
        (0, 2, "algo-1", True), (1, 2, "algo-2", True)]
    assert_applied(parameters, reports, STEPS)
    learning = [r["losses"] for r in reports if r["losses"]]  # a pipeline's loss is on its last stage only
    assert learning and all(sum(losses[-5:]) < sum(losses[:5]) / 2 for losses in learning), learning
