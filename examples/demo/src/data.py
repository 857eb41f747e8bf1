"""The demo's data: a synthetic 4-class classification problem, written as CSV shards (one row:
16 features, then the integer label) and read back by the training script."""

from __future__ import annotations

import glob
import os

import numpy as np

FEATURES = 16
CLASSES = 4


def make_dataset(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Like scikit-learn's make_classification: every class is 3 Gaussian clusters on the corners of a
    6-dimensional hypercube, plus 10 noise features, all mixed by a random rotation, plus 2% label
    noise. Not linearly separable: a linear model stays near 63% on it, a small MLP passes 90%."""
    informative, clusters_per_class, separation = 6, 3, 2.0
    fixed = np.random.default_rng(1234)  # the same clusters and mixing for train and test
    centers = fixed.choice([-1.0, 1.0], size=(CLASSES * clusters_per_class, informative)) * separation
    mixing = fixed.normal(size=(FEATURES, FEATURES)) / np.sqrt(FEATURES)
    rng = np.random.default_rng(seed)
    cluster = rng.integers(0, CLASSES * clusters_per_class, size=rows)
    z = rng.normal(size=(rows, FEATURES))
    z[:, :informative] += centers[cluster]
    x = (z @ mixing).astype(np.float32)
    y = cluster % CLASSES
    noisy = rng.random(rows) < 0.02
    y[noisy] = rng.integers(0, CLASSES, size=noisy.sum())
    return x, y.astype(np.int64)


def write_shards(directory: str, rows: int, shards: int, seed: int) -> list[str]:
    """Write `rows` examples as `shards` CSV files of equal size under `directory`."""
    os.makedirs(directory, exist_ok=True)
    for old in glob.glob(os.path.join(directory, "*.csv")):
        os.remove(old)
    x, y = make_dataset(rows, seed)
    paths = []
    for i, (xs, ys) in enumerate(zip(np.array_split(x, shards), np.array_split(y, shards))):
        path = os.path.join(directory, f"part-{i:05d}.csv")
        table = np.column_stack([xs, ys.astype(np.float32)])
        fmt = ["%.6f"] * FEATURES + ["%d"]
        header = ",".join([f"x{j}" for j in range(FEATURES)] + ["label"])
        np.savetxt(path, table, delimiter=",", fmt=fmt, header=header, comments="")
        paths.append(path)
    return paths


def read_shards(directory: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Every CSV shard under `directory` (what this instance received), as (features, labels, files)."""
    files = sorted(glob.glob(os.path.join(directory, "**", "*.csv"), recursive=True))
    if not files:
        raise FileNotFoundError(f"no .csv files under {directory}")
    table = np.concatenate([np.loadtxt(f, delimiter=",", skiprows=1, ndmin=2) for f in files])
    return table[:, :FEATURES].astype(np.float32), table[:, FEATURES].astype(np.int64), files
