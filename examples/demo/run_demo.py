"""`make demo`: a 2-instance x 2-process PyTorch DDP job on this machine, through shipyard's SDK.

1. writes a small synthetic classification data set as CSV shards under $SHIPYARD_HOME/demo/data
   (8 train shards, distributed ShardedByS3Key: each instance receives 4 of them; 1 test shard,
   FullyReplicated);
2. trains an MLP with torchrun + DDP (gloo on CPU) on 2 simulated instances, 2 processes each,
   streaming every host's log and the job's status changes;
3. prints where the model is, the final metrics, and how to look at the job again;
4. opens model.tar.gz and scores the saved model on the test set, to show the artifact is real.

SHIPYARD_HOME (default ~/.shipyard) is where the job, its logs and its artifacts are kept."""

from __future__ import annotations

import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "src"
sys.path.insert(0, str(SOURCE))  # the data helpers the training script uses too

from data import read_shards, write_shards  # noqa: E402

from shipyard.pytorch import PyTorch  # noqa: E402
from shipyard.sdk.inputs import TrainingInput  # noqa: E402
from shipyard.store import shipyard_home  # noqa: E402

HYPERPARAMETERS = {"epochs": 6, "lr": 0.05, "batch-size": 64, "hidden": 64}


def main() -> int:
    data = shipyard_home() / "demo" / "data"
    train_files = write_shards(str(data / "train"), rows=8000, shards=8, seed=1)
    write_shards(str(data / "test"), rows=2000, shards=1, seed=2)
    print(f"data: {len(train_files)} train shards (8000 rows) and 1 test shard (2000 rows) under {data}")

    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(SOURCE),
        instance_count=2,
        instance_type="local",
        hyperparameters=HYPERPARAMETERS,
        distribution={"torch_distributed": {"enabled": True, "processes_per_host": 2}},
        metric_definitions=[
            {"Name": "loss", "Regex": r"loss=([0-9.]+)"},
            {"Name": "accuracy", "Regex": r"accuracy=([0-9.]+)"},
        ],
        base_job_name="shipyard-demo",
    )
    started = time.time()
    estimator.fit({
        "train": TrainingInput(f"file://{data / 'train'}", distribution="ShardedByS3Key"),
        "test": f"file://{data / 'test'}",
    })
    elapsed = time.time() - started

    job = estimator.latest_training_job
    description = job.describe()
    print()
    print(f"job {job.name}: {description['TrainingJobStatus']} in {elapsed:.1f}s (submit to completed)")
    print(f"model: {estimator.model_data}")
    print("final metrics:")
    for metric in description["FinalMetricDataList"]:
        print(f"  {metric['MetricName']:<10} {metric['Value']:.4f}")
    print("look at the job:")
    print(f"  shipyard jobs describe {job.name}")
    print(f"  shipyard logs {job.name}")
    print(f"  (SHIPYARD_HOME={shipyard_home()}; per-host logs in {shipyard_home() / 'jobs' / job.name / 'logs'})")

    accuracy = score_model(estimator.model_data, data / "test")
    print(f"the saved model, loaded from model.tar.gz, scores accuracy={accuracy:.4f} on the test set")
    return 0


def score_model(model_data: str, test_dir: Path) -> float:
    """Load model.pth from the job's model.tar.gz and score it, as a serving container would."""
    import json

    import torch

    from train import MLP

    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(model_data.removeprefix("file://")) as tar:
            tar.extractall(tmp, filter="data")
        config = json.loads((Path(tmp) / "model-config.json").read_text())
        model = MLP(config["hidden"])
        model.load_state_dict(torch.load(Path(tmp) / "model.pth", weights_only=True))
    x, y, _ = read_shards(str(test_dir))
    with torch.no_grad():
        predicted = model(torch.from_numpy(x)).argmax(1)
    return float((predicted == torch.from_numpy(y)).float().mean())


if __name__ == "__main__":
    sys.exit(main())
