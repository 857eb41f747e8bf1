"""SageMaker model parallel v1 end to end: a typical SMP v1 script (scripts/smp_v1_train.py) as a
2-instance job with SageMaker's v1 distribution (`smdistributed.modelparallel` with `partitions: 2`,
launched by `mpi`, one process per host). The test sees that the model really was cut into two pipeline
stages, stage 0 on algo-1 and stage 1 on algo-2 (each rank's parameters, gradients, optimizer state and
layer calls: tests/parallel/applied.py), that every rank got the same falling loss from @smp.step, and
that smp.save wrote one partial file per stage and the gathered whole model. Tensor parallelism and the
step's arithmetic are checked against one process in tests/libraries/test_smp_v1.py."""

from __future__ import annotations

import io
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

pytestmark = [pytest.mark.slow, pytest.mark.sandbox,
              pytest.mark.skipif(shutil.which("mpirun") is None, reason="SMP v1 jobs run under mpi (make setup)")]
STEPS = 30
SMP_OPTIONS = {"enabled": True, "parameters": {"partitions": 2, "microbatches": 2, "pipeline": "interleaved",
                                               "placement_strategy": "cluster", "ddp": True,
                                               "auto_partition": True, "optimize": "speed"}}
MPI_OPTIONS = {"enabled": True, "processes_per_host": 1}


def test_smp_v1_script_runs_its_model_as_two_pipeline_stages_across_the_instances(home, tmp_path):
    torch = pytest.importorskip("torch")
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(Path(__file__).parent / "scripts" / "smp_v1_train.py", source / "train.py")
    for helper in ("evidence.py", "parallel_scenarios.py"):
        shutil.copy(PARALLEL / helper, source)
    estimator = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=2, instance_type="local",
                        distribution={"smdistributed": {"modelparallel": SMP_OPTIONS}, "mpi": MPI_OPTIONS},
                        hyperparameters={"steps": STEPS}, base_job_name="smp-v1")
    estimator.fit(logs=False)
    job = estimator.latest_training_job
    assert job.describe()["TrainingJobStatus"] == "Completed"
    events = [json.loads(line) for log in (Store(home).job_dir(job.name) / "events").glob("*.jsonl")
              for line in log.read_text().splitlines()]
    assert sorted((e["host"], e["launcher"]) for e in events if e.get("phase") == "Training") == [
        ("algo-1", "mpi"), ("algo-2", "mpi")]

    with tarfile.open(estimator.model_data.removeprefix("file://")) as tar:
        files = {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    reports = sorted((json.loads(files[name]) for name in files if name.startswith("evidence-")),
                     key=lambda report: report["rank"])
    # one mpirun rank per instance; stage 0 (the first three layers) on algo-1, stage 1 on algo-2
    assert [(r["rank"], r["size"], r["host"], r["mpi"]) for r in reports] == [
        (0, 2, "algo-1", True), (1, 2, "algo-2", True)]
    assert [r["ranks"] for r in reports] == [
        {"local": 0, "pp": 0, "pp_size": 2, "dp": 0, "dp_size": 1, "tp": 0, "mp": 0, "mp_size": 2},
        {"local": 0, "pp": 1, "pp_size": 2, "dp": 0, "dp_size": 1, "tp": 0, "mp": 1, "mp_size": 2}]
    assert_applied({"pipeline_parallel_degree": 2, "microbatches": 2}, reports, STEPS)

    # @smp.step's reduce_mean() gives every stage the same loss, and it falls
    losses = reports[0]["losses"]
    assert reports[1]["losses"] == losses and len(losses) == STEPS
    assert sum(losses[-5:]) < sum(losses[:5]) / 2, losses
    before, after = reports[0]["eval"]
    assert reports[1]["eval"] == [before, after] and after < before / 2

    # smp.save(partial=True): each stage's own file, named by its mp_rank; the whole model from rank 0
    partial = [torch.load(io.BytesIO(files[f"model.pt_{r}"]), weights_only=False)["model_state_dict"]
               for r in range(2)]
    for stage, state in enumerate(partial):
        assert state.pop("_smp_is_partial") is True
        assert sorted({name.split(".")[0] for name in state}) == [["0", "2"], ["4"]][stage]  # the Linear layers
    full = torch.load(io.BytesIO(files["full.pt"]), weights_only=False)
    assert full.pop("_smp_is_partial") is False
    assert sorted(full) == sorted({**partial[0], **partial[1]})
    assert all(torch.equal(full[name], value) for state in partial for name, value in state.items())
