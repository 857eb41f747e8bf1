"""Shared by the TensorFlow e2e scripts: a tiny regression problem, the Keras model, and a record of
what this instance saw (written to output/data, so it comes back in output.tar.gz)."""

import json
import os

import numpy as np

from shipyard.runtime.launchers.parameter_server import is_up  # noqa: F401  (the scripts wait on the chief with it)

SAMPLES, FEATURES = 256, 4


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(SAMPLES, FEATURES)).astype("float32")
    return x, x @ rng.normal(size=(FEATURES, 1)).astype("float32")


def model():
    import keras

    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])


def tf_config() -> dict:
    config = json.loads(os.environ["TF_CONFIG"])
    print(f"TF_CONFIG task {json.dumps(config['task'])}", flush=True)
    return config


def record(**fields) -> None:
    out = os.environ["SM_OUTPUT_DATA_DIR"]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{os.environ['SM_CURRENT_HOST']}.json"), "w") as f:
        json.dump({"tf_config": json.loads(os.environ["TF_CONFIG"]), **fields}, f)

