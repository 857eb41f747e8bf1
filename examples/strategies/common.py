"""Shared by the strategy examples' run.py: a generated regression data set, written where the job
reads it as its `train` channel, and the submit-and-report step every example ends with."""

from __future__ import annotations

import tarfile
import time
from pathlib import Path

import numpy as np

from shipyard.store import shipyard_home

ROWS, FEATURES = 2048, 8


def write_data(example: str) -> Path:
    """`data.npz` (x, y = a noisy linear function of x) under $SHIPYARD_HOME/examples/<example>/train."""
    directory = shipyard_home() / "examples" / example / "train"
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, FEATURES)).astype("float32")
    y = (x @ rng.normal(size=(FEATURES, 1)) + 0.1 * rng.normal(size=(ROWS, 1))).astype("float32")
    np.savez(directory / "data.npz", x=x, y=y)
    return directory


def run(estimator, example: str) -> None:
    """Fit on the generated data, then say where the model is and what it holds."""
    data = write_data(example)
    started = time.time()
    estimator.fit({"train": f"file://{data}"})
    job = estimator.latest_training_job
    print()
    print(f"job {job.name}: {job.describe()['TrainingJobStatus']} in {time.time() - started:.1f}s")
    print(f"model: {estimator.model_data}")
    with tarfile.open(estimator.model_data.removeprefix("file://")) as tar:
        print(f"  holds: {', '.join(sorted(m.name for m in tar.getmembers() if m.isfile()))}")
    print(f"logs:  shipyard logs {job.name}   ({shipyard_home() / 'jobs' / job.name / 'logs'})")
