"""TensorFlow's strategies end to end: a Keras model trained for real across 2 instances under
ParameterServerStrategy (a parameter server beside the script on every instance) and under
MultiWorkerMirroredStrategy, from the SDK; the chief's model comes back in model.tar.gz."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from shipyard.errors import UnexpectedStatusError
from shipyard.storage import transfer
from shipyard.tensorflow import TensorFlow

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).parent / "scripts"
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2"}


def _estimator(tmp_path, script: str, distribution: dict, **kwargs) -> TensorFlow:
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(SCRIPTS / script, source / "train.py")
    shutil.copy(SCRIPTS / "tf_common.py", source)
    return TensorFlow(entry_point="train.py", source_dir=str(source), instance_count=2, instance_type="local",
                      distribution=distribution, environment=QUIET, stop_grace_seconds=5, **kwargs)


def _fit(tmp_path, script: str, distribution: dict) -> TensorFlow:
    est = _estimator(tmp_path, script, distribution, max_run=600)
    est.fit(wait=True, logs=False)
    description = est.latest_training_job.describe()
    assert description["TrainingJobStatus"] == "Completed", description.get("FailureReason")
    return est


def _members(uri: str, tmp: Path) -> dict[str, bytes]:
    transfer.download(uri, tmp)
    with tarfile.open(tmp / Path(uri).name) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _records(est: TensorFlow, tmp_path: Path) -> dict[str, dict]:
    output = _members(est.model_data.replace("model.tar.gz", "output.tar.gz"), tmp_path / "output")
    return {name.removesuffix(".json"): json.loads(data) for name, data in output.items()}


def test_parameter_server_strategy(home, tmp_path):
    est = _fit(tmp_path, "tf_ps_train.py", {"parameter_server": {"enabled": True}})
    assert set(_members(est.model_data, tmp_path / "model")) == {"model.keras"}

    seen = _records(est, tmp_path)
    assert set(seen) == {"algo-1", "algo-2"}
    cluster = seen["algo-1"]["tf_config"]["cluster"]
    assert seen["algo-2"]["tf_config"]["cluster"] == cluster
    assert sorted(cluster) == ["master", "ps", "worker"] and len(cluster["ps"]) == 2
    assert seen["algo-1"]["tf_config"]["task"] == {"index": 0, "type": "master"}
    assert seen["algo-2"]["tf_config"]["task"] == {"index": 0, "type": "worker"}
    chief = seen["algo-1"]
    assert chief["loss_after"] < chief["loss_before"] / 2
    # both parameter servers (one started beside the script on each instance) hold variables
    assert chief["variables_on"] == ["/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"]
    for index, host in enumerate(("algo-1", "algo-2")):
        log = (home / "jobs" / est.latest_training_job.name / "logs" / f"{host}.log").read_text()
        assert f"parameter server ps:{index} listening on {cluster['ps'][index]}" in log


def test_a_failed_worker_fails_the_job_at_once(home, tmp_path):
    """Its parameter server is killed rather than kept up for a chief that would wait for the worker
    forever (the toolkit too only waits for the master after a script that succeeded)."""
    est = _estimator(tmp_path, "tf_ps_train.py", {"parameter_server": {"enabled": True}}, max_run=300,
                     hyperparameters={"fail-worker": True})
    with pytest.raises(UnexpectedStatusError):
        est.fit(wait=True, logs=False)
    description = est.latest_training_job.describe()
    assert description["TrainingJobStatus"] == "Failed"
    assert description["FailureReason"].startswith("AlgorithmError: algo-2:"), description["FailureReason"]
    assert "worker failed on purpose" in description["FailureReason"]


def test_multi_worker_mirrored_strategy(home, tmp_path):
    est = _fit(tmp_path, "tf_mwms_train.py", {"multi_worker_mirrored_strategy": {"enabled": True}})
    assert set(_members(est.model_data, tmp_path / "model")) == {"model.keras"}  # the chief's only

    seen = _records(est, tmp_path)
    assert set(seen) == {"algo-1", "algo-2"}
    workers = seen["algo-1"]["tf_config"]["cluster"]["worker"]
    assert len(workers) == 2 and seen["algo-2"]["tf_config"]["cluster"]["worker"] == workers
    for index, host in enumerate(("algo-1", "algo-2")):
        assert seen[host]["tf_config"]["task"] == {"index": index, "type": "worker"}
        assert seen[host]["replicas"] == 2
        losses = seen[host]["losses"]
        assert losses[-1] < losses[0] / 2
    # synchronous training: the same (all-reduced) losses and the same weights on both workers
    assert seen["algo-1"]["losses"] == seen["algo-2"]["losses"]
    assert seen["algo-1"]["weights_digest"] == seen["algo-2"]["weights_digest"]


@pytest.mark.sandbox
def test_model_dir_is_the_jobs_own_under_its_output(home, tmp_path):
    """Issue 22: --model_dir is <output_path>/<job>/model (a path under a local output), unique per job, and
    every instance can write it from its sandbox, as scripts that export or checkpoint there expect."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(
        "import argparse, os\n"
        "p = argparse.ArgumentParser(); p.add_argument('--model_dir'); a, _ = p.parse_known_args()\n"
        "assert os.environ['TRAINING_JOB_NAME'] in a.model_dir, a.model_dir\n"
        "os.makedirs(a.model_dir, exist_ok=True)\n"
        "open(os.path.join(a.model_dir, os.environ['SM_CURRENT_HOST']), 'w').write(a.model_dir)\n")
    output = tmp_path / "out"
    jobs = []
    for _ in range(2):
        est = TensorFlow(entry_point="train.py", source_dir=str(source), instance_count=2, instance_type="local",
                         output_path=f"file://{output}", stop_grace_seconds=5, max_run=120)
        est.fit(logs=False)
        jobs.append(est.latest_training_job.name)
    for job in jobs:
        model_dir = output / job / "model"
        assert sorted(p.name for p in model_dir.iterdir()) == ["algo-1", "algo-2"]
        assert (model_dir / "algo-1").read_text() == str(model_dir)
