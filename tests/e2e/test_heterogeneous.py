"""Issue 18, end to end: a heterogeneous job whose `data` group prepares batches and serves them over the
network to a `train` group running torch DDP (examples/heterogeneous/src/train.py). Each host's report
shows the contract it saw and what it ran; the logs show which hosts ran torchrun. Then the example's
run.py, which runs that job and its homogeneous twin and says which trained faster."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from shipyard.inputs import TrainingInput
from shipyard.instance_group import InstanceGroup
from shipyard.pytorch import PyTorch
from shipyard.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "heterogeneous"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reports(store: Store, job: str, host: str) -> list[dict]:
    log = store.log_path(job, host).read_text()
    return [json.loads(line.split("HETERO ", 1)[1]) for line in log.splitlines() if "HETERO {" in line]


def test_data_group_feeds_a_ddp_train_group(home, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(EXAMPLE / "src" / "train.py", source / "train.py")
    labels = tmp_path / "labels"
    labels.mkdir()
    (labels / "classes.txt").write_text("0\n1\n")
    data, trainers = InstanceGroup("data", "local", 1), InstanceGroup("train", "local", 2)
    estimator = PyTorch(entry_point="train.py", source_dir=str(source), instance_groups=[data, trainers],
                        distribution={"torch_distributed": {"enabled": True}, "instance_groups": [trainers]},
                        hyperparameters={"port": _free_port(), "batches": 12, "consumers": 2},
                        max_run=300, stop_grace_seconds=5)
    estimator.fit({"labels": TrainingInput(str(labels), instance_groups=["train"])}, logs="None")
    job = estimator.latest_training_job
    description = job.describe()
    assert description["TrainingJobStatus"] == "Completed"
    assert description["ResourceConfig"]["InstanceGroups"] == [
        {"InstanceGroupName": "data", "InstanceType": "local", "InstanceCount": 1},
        {"InstanceGroupName": "train", "InstanceType": "local", "InstanceCount": 2}]
    assert description["InputDataConfig"][0]["DataSource"]["S3DataSource"]["InstanceGroupNames"] == ["train"]

    store = Store()
    groups = [{"instance_group_name": "data", "instance_type": "local", "hosts": ["algo-1"]},
              {"instance_group_name": "train", "instance_type": "local", "hosts": ["algo-2", "algo-3"]}]
    (server,) = _reports(store, job.name, "algo-1")
    assert server["group"] == "data" and server["group_hosts"] == ["algo-1"] and server["is_hetero"] == "true"
    assert server["resourceconfig"] == {"current_group_name": "data", "current_instance_type": "local",
                                        "instance_groups": groups}
    assert server["distribution_groups"] == ["train"] and not server["torchrun"]
    assert server["channels"] == []                          # the channel went to the train group only
    assert server["served"] == {"0": 12, "1": 12}
    log = store.log_path(job.name, "algo-1").read_text()
    assert "torch.distributed.run" not in log                # the data host ran the script plainly

    trainers_seen = [r for host in ("algo-2", "algo-3") for r in _reports(store, job.name, host)]
    assert sorted(r["rank"] for r in trainers_seen) == [0, 1]
    for report in trainers_seen:
        assert report["group"] == "train" and report["group_hosts"] == ["algo-2", "algo-3"] and report["torchrun"]
        assert report["resourceconfig"]["current_group_name"] == "train"
        assert report["channels"] == ["labels"]
        assert (report["world"], report["received"], report["all_received"]) == (2, 12, 24)
        assert report["last_loss"] < report["first_loss"]    # it trained on what the data group sent
    for host in ("algo-2", "algo-3"):
        assert "torch.distributed.run" in store.log_path(job.name, host).read_text()
    model = Path(description["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://"))
    with tarfile.open(model) as archive:
        assert "model.pt" in archive.getnames()


def test_the_example_compares_both_shapes_of_the_job(home):
    result = subprocess.run([sys.executable, str(EXAMPLE / "run.py"), "--batches", "6", "--batch-size", "16",
                             "--features", "16", "--work", "2", "--step-ms", "0"],
                            env={**os.environ}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for name in ("homogeneous", "heterogeneous"):
        assert re.search(rf"^{name} +Completed training loop +[0-9.]+s, waiting for data +[0-9.]+s, wall +[0-9.]+s, "
                         rf"12 batches", result.stdout, re.MULTILINE), result.stdout
    assert re.search(r"^speed-up of the training loop: [0-9.]+x; of the job: [0-9.]+x$", result.stdout, re.MULTILINE)
    jobs = Store().list_jobs()
    assert sorted(j.spec.instance_groups != () for j in jobs) == [False, True]


def test_a_lost_train_host_is_replaced_in_its_group(home, tmp_path, wait_for_line):
    """Spot: a train host interrupted mid-training is replaced by one of its own group and type; the data
    host keeps its instance and rejoins (the script runs again on every host, as in any job)."""
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(EXAMPLE / "src" / "train.py", source / "train.py")
    data, trainers = InstanceGroup("data", "local", 1), InstanceGroup("train", "local", 2)
    estimator = PyTorch(entry_point="train.py", source_dir=str(source), instance_groups=[data, trainers],
                        distribution={"torch_distributed": {"enabled": True}, "instance_groups": [trainers]},
                        hyperparameters={"port": _free_port(), "batches": 40, "step-ms": 100, "consumers": 2},
                        use_spot_instances=True, max_wait=600, max_run=300, spot_without_checkpoints=True,
                        stop_grace_seconds=5)
    estimator.fit(wait=False)
    job = estimator.latest_training_job
    store = Store()
    wait_for_line(store.log_path(job.name, "algo-3"), "running:")
    time.sleep(2)   # mid-training: 40 steps of at least 0.1 s
    done = subprocess.run([sys.executable, "-m", "shipyard.cli.main", "spot", "interrupt", job.name,
                           "--host", "algo-3"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    description = job.wait(logs=False)
    assert description["TrainingJobStatus"] == "Completed", description.get("FailureReason")
    assert [a["Outcome"] for a in description["Shipyard"]["Attempts"]] == ["Interrupted", "Completed"]
    instances = home / "jobs" / job.name / "instances"
    assert sorted(p.name for p in instances.iterdir()) == ["algo-1", "algo-2", "algo-3", "algo-3-2"]
    replaced = json.loads((instances / "algo-3-2" / "agent.json").read_text())
    assert replaced["instance_type"] == "local" and [g["instance_group_name"] for g in replaced["instance_groups"]] == \
        ["data", "train"]
    final = {r["host"]: r for r in _reports(store, job.name, "algo-1") + _reports(store, job.name, "algo-2")
             + _reports(store, job.name, "algo-3")}
    assert final["algo-3"]["group"] == "train" and final["algo-3"]["all_received"] == 80
    assert final["algo-1"]["served"] == {"0": 40, "1": 40}
    assert "rejoining with a replaced instance" in store.log_path(job.name, "algo-1").read_text()
