"""`mpi` jobs end to end through the SDK: one mpirun on the leader, ranks inside their own instances'
sandboxes (2 instances x 2 processes), mpi4py and Horovod-style torch.distributed, and a rank's
failure naming its host."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from shipyard import Estimator
from shipyard.errors import UnexpectedStatusError
from shipyard.pytorch import PyTorch
from shipyard.runtime.failure import error_message
from shipyard.sdk.job import TrainingJob

pytestmark = [pytest.mark.slow, pytest.mark.sandbox,
              pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpi jobs need OpenMPI (make setup)")]
SCRIPTS = Path(__file__).parent / "scripts"
MPI = {"mpi": {"enabled": True, "processes_per_host": 2}}


def _source(tmp_path: Path, script: str) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(SCRIPTS / script, source / "train.py")
    shutil.copy(SCRIPTS / "framework_noise.py", source)
    return source


def _ranks(job: TrainingJob) -> list[dict]:
    path = job.describe()["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://")
    with tarfile.open(path) as tar:
        records = [json.loads(tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()]
    return sorted(records, key=lambda record: record["rank"])


def test_mpi4py_allreduce_across_two_instances(home, tmp_path):
    est = Estimator(entry_point="train.py", source_dir=str(_source(tmp_path, "mpi_allreduce.py")), instance_count=2,
                    distribution=MPI, hyperparameters={"note": "a b; $(rm -rf /)"}, stop_grace_seconds=5)
    est.fit(logs=False)
    job = est.latest_training_job
    assert job.describe()["TrainingJobStatus"] == "Completed"
    ranks = _ranks(job)
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    for record in ranks:
        host = f"algo-{record['rank'] // 2 + 1}"
        assert record["size"] == 4 and record["sum"] == 1 + 2 + 3 + 4
        # Each rank lives in its own instance: host name, /opt/ml, SM_CURRENT_HOST are that instance's.
        assert record["hostname"] == record["sm_current_host"] == record["resourceconfig_host"] == host
        assert record["local_rank"] == record["rank"] % 2
        assert record["all_hostnames"] == ["algo-1", "algo-1", "algo-2", "algo-2"]
        assert record["cwd"] == "/opt/ml/code" and record["sm_hosts"] == ["algo-1", "algo-2"]
        assert record["hp_note"] == "a b; $(rm -rf /)" and record["argv"] == ["--note", "a b; $(rm -rf /)"]
    logs = home / "jobs" / job.name / "logs"
    leader_log = (logs / "algo-1.log").read_text()
    for rank in range(4):  # every rank's output reaches the leader's log, tagged as the toolkit tags it
        assert f"[1,mpirank:{rank},algo-{rank // 2 + 1}]<stdout>:rank {rank} of 4" in leader_log
    assert "finished with exit code 0" in (logs / "algo-2.log").read_text()


def test_torch_gloo_from_the_mpi_rank_variables(home, tmp_path):
    torch = pytest.importorskip("torch")
    est = PyTorch(entry_point="train.py", source_dir=str(_source(tmp_path, "mpi_torch_gloo.py")), instance_count=2,
                  distribution=MPI, stop_grace_seconds=5)
    est.fit(logs=False)
    ranks = _ranks(est.latest_training_job)
    assert [(r["rank"], r["world"], r["local_rank"], r["host"]) for r in ranks] == [
        (0, 4, 0, "algo-1"), (1, 4, 1, "algo-1"), (2, 4, 0, "algo-2"), (3, 4, 1, "algo-2")]
    assert all(r["sum"] == 10.0 for r in ranks)
    # The DDP step equals one step on the four ranks' batches averaged, computed here in one process.
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    grads = []
    for rank in range(4):
        model.zero_grad()
        torch.manual_seed(100 + rank)
        model(torch.randn(8, 4)).pow(2).mean().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    expected = params - 0.1 * torch.stack(grads).mean(0)
    for record in ranks:
        assert torch.allclose(torch.tensor(record["weights"]), expected, atol=1e-6)


def test_a_failing_rank_fails_the_job_naming_its_host(home, tmp_path):
    est = Estimator(entry_point="train.py", source_dir=str(_source(tmp_path, "mpi_fail.py")), instance_count=2,
                    distribution=MPI, stop_grace_seconds=5)
    with pytest.raises(UnexpectedStatusError) as failure:
        est.fit(logs=False)
    reason = failure.value.reason
    assert reason.startswith("AlgorithmError: algo-1: ExecuteUserScriptError:\nExitCode 1\n")
    # the rank's exception and its frame, not the framework noise it printed first
    error = error_message(reason)
    assert error.startswith("MPI rank 2 on algo-2 failed first:\nValueError: rank 2 fails on purpose\n"), error
    assert 'File "train.py", line 14, in <module>\n' in error  # mpi4py runs it from /opt/ml/code
    assert "absl" not in error and "NCCL" not in error and len(reason) <= 1024
    assert est.latest_training_job.describe()["TrainingJobStatus"] == "Failed"


def test_concurrent_mpi_jobs_do_not_share_openmpi_files(home, tmp_path):
    """Every job's leader sandbox gives mpirun the same host name and PID, hence the same OpenMPI job
    id; each job's private temporary directory keeps their session and shared-memory files apart."""
    source = _source(tmp_path, "mpi_allreduce.py")
    estimators = [Estimator(entry_point="train.py", source_dir=str(source), instance_count=2, distribution=MPI,
                            stop_grace_seconds=5) for _ in range(2)]
    for est in estimators:
        est.fit(wait=False)
    for est in estimators:
        est.latest_training_job.wait(logs="None")
        assert [r["sum"] for r in _ranks(est.latest_training_job)] == [10] * 4
