"""The issue's main check: a 2-instance x 2-process torch DDP job run from the SDK with an S3
channel on moto's server, asserting the artifacts, the record, the contract the script saw, log
completeness and metrics."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from shipyard.pytorch import PyTorch
from shipyard.sdk.inputs import TrainingInput
from shipyard.storage import transfer

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).parent / "scripts"


def _members(uri: str, tmp: Path) -> dict[str, bytes]:
    transfer.download(uri, tmp)
    with tarfile.open(tmp / Path(uri).name) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


@pytest.mark.sandbox  # the /opt/ml contract
def test_two_by_two_ddp_job_from_the_sdk(home, s3, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(SCRIPTS / "contract_dump.py", source / "train.py")
    shutil.copy(SCRIPTS / "helper.py", source)
    bucket = s3.bucket("data")
    for i in range(5):
        s3.put(f"{bucket}/train/part-{i}.csv", f"{i}\n".encode())
    s3.put(f"{bucket}/train/nested/extra.csv", b"x\n")
    local = tmp_path / "test"
    local.mkdir()
    for i in range(3):
        (local / f"t{i}.txt").write_text(str(i))
    s3.bucket("out")

    est = PyTorch(
        entry_point="train.py", source_dir=str(source), instance_count=2, instance_type="local",
        hyperparameters={"epochs": 3, "lr": 0.01, "batch-size": 8, "note": "a b; $(rm -rf /)"},
        distribution={"torch_distributed": {"enabled": True, "processes_per_host": 2}},
        output_path="s3://out/jobs", environment={"FOO": "1"}, max_run=600, base_job_name="demo",
        metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"},
                            {"Name": "never", "Regex": "nothing-prints-this=([0-9]+)"}],
        stop_grace_seconds=5,
    )
    est.fit({"train": f"{bucket}/train",
             "test": TrainingInput(f"file://{local}", distribution="ShardedByS3Key")}, wait=True, logs=True)

    job = est.latest_training_job
    name = job.name
    description = job.describe()
    assert description["TrainingJobStatus"] == "Completed"
    statuses = [t["Status"] for t in description["SecondaryStatusTransitions"]]
    assert statuses == ["Starting", "Downloading", "Training", "Uploading", "Completed"]
    assert description["TrainingTimeInSeconds"] > 0
    assert est.model_data == f"s3://out/jobs/{name}/output/model.tar.gz"
    final = {m["MetricName"]: m["Value"] for m in description["FinalMetricDataList"]}
    assert set(final) == {"loss"}
    assert any("'never'" in w and "never matched" in w for w in description["Shipyard"]["Warnings"])

    model = _members(est.model_data, tmp_path / "model")
    assert set(model) == {"algo-1.json", "algo-2.json"}  # both hosts' model dirs merged
    output = _members(f"s3://out/jobs/{name}/output/output.tar.gz", tmp_path / "output")
    assert set(output) == {"algo-1.txt", "algo-2.txt"}
    assert s3.get(f"s3://out/jobs/{name}/source/sourcedir.tar.gz")

    seen = {host: json.loads(model[f"{host}.json"]) for host in ("algo-1", "algo-2")}
    for host, record in seen.items():
        env = record["env"]
        assert record["host"] == host
        assert record["world"] == 4 and record["allreduce"] == 10.0
        assert record["algo_1"] == "127.0.1.1"
        assert record["cwd"] == "/opt/ml/code" and record["helper"] == "helper"
        assert record["code"] == ["helper.py", "train.py"]
        assert env["SM_CURRENT_HOST"] == host
        assert env["SM_HOSTS"] == '["algo-1","algo-2"]'
        assert env["SM_MODEL_DIR"] == "/opt/ml/model"
        assert env["SM_CHANNEL_TRAIN"] == "/opt/ml/input/data/train"
        assert env["SM_CHANNELS"] == '["test","train"]'
        assert env["SM_HP_BATCH-SIZE"] == "8" and env["SM_HP_LR"] == "0.01"
        assert env["TRAINING_JOB_NAME"] == name
        assert json.loads(env["SM_USER_ARGS"]) == record["argv"]
        # Sorted keys, values str()'d, metacharacters passed literally (never through a shell).
        assert record["argv"] == ["--batch-size", "8", "--epochs", "3", "--lr", "0.01", "--note", "a b; $(rm -rf /)"]
        training_env = json.loads(env["SM_TRAINING_ENV"])
        assert training_env["master_hostname"] == "algo-1"
        assert training_env["is_master"] == (host == "algo-1")
        config = record["config"]
        assert config["hyperparameters"]["epochs"] == "3"
        assert json.loads(config["hyperparameters"]["sagemaker_torch_distributed_enabled"]) is True
        assert config["resourceconfig"]["current_host"] == host
        assert config["resourceconfig"]["hosts"] == ["algo-1", "algo-2"]
        assert config["inputdataconfig"]["test"]["S3DistributionType"] == "ShardedByS3Key"
        # Fully replicated: every instance has every object, nested keys keep their paths.
        assert record["channels"]["train"] == sorted([f"part-{i}.csv" for i in range(5)] + ["nested/extra.csv"])
    shards = [set(seen[h]["channels"]["test"]) for h in ("algo-1", "algo-2")]
    assert not shards[0] & shards[1] and shards[0] | shards[1] == {"t0.txt", "t1.txt", "t2.txt"}

    # Every line of every process of every host, in order per process.
    for host, ranks in (("algo-1", (0, 1)), ("algo-2", (2, 3))):
        log = (home / "jobs" / name / "logs" / f"{host}.log").read_text().splitlines()
        for rank in ranks:
            lines = [line for line in log if line.endswith(f"of rank {rank}")]
            assert lines == [f"{host}[{rank % 2}] | line {i} of rank {rank}" for i in range(50)]

    # Attach from another process.
    attached = subprocess.run(
        [sys.executable, "-c", f"from shipyard.pytorch import PyTorch; e = PyTorch.attach({name!r}); "
                               "print(e.model_data); print(e.metric_definitions[0]['Name']); print(e.hyperparameters()['epochs'])"],
        capture_output=True, text=True, timeout=60,
    )
    assert attached.returncode == 0, attached.stderr
    assert attached.stdout.split() == [est.model_data, "loss", "3"]
