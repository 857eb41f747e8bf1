"""TF2 ParameterServerStrategy with the TF_CONFIG SageMaker (and shipyard) give under
`parameter_server`: cluster.master = the first host, cluster.worker = the others, cluster.ps = every
host, and a parameter server already running beside this script on every instance.

TF2 calls the coordinating task `chief`, so the script renames `master`. The chief builds the model,
schedules training steps on the workers and saves the model; a worker only serves its task (a
tf.distribute.Server) until the chief is done. Keras 3's model.fit cannot train under this strategy,
hence the custom training loop."""

import argparse
import json
import os
import socket
import sys
import time

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.05)
args, _ = parser.parse_known_args()

config = json.loads(os.environ["TF_CONFIG"])
cluster, task = dict(config["cluster"]), config["task"]
cluster["chief"] = cluster.pop("master")
chief = cluster["chief"][0]


def is_up(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        return True
    except OSError:
        return False


if task["type"] == "worker":
    tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="worker", task_index=task["index"], start=True)
    deadline = time.monotonic() + 300
    while not is_up(chief):  # the chief has not started yet
        if time.monotonic() > deadline:
            sys.exit(f"the chief {chief} never came up")
        time.sleep(0.5)
    while is_up(chief):  # serve steps until the chief is done
        time.sleep(0.5)
    sys.exit(0)

resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
    tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc")
strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

data = np.load(os.path.join(os.environ["SM_CHANNEL_TRAIN"], "data.npz"))
x, y = data["x"], data["y"]
with strategy.scope():  # the variables live on the parameter servers
    model = keras.Sequential([keras.Input((x.shape[1],)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])


@tf.function
def step(iterator):
    def replica_step(batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(features, training=True) - labels) ** 2)
        for variable, grad in zip(model.trainable_variables, tape.gradient(loss, model.trainable_variables)):
            variable.assign_sub(args.lr * grad)
        return loss

    return strategy.run(replica_step, args=(next(iterator),))


dataset = coordinator.create_per_worker_dataset(
    lambda: tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x)).repeat().batch(args.batch_size))
iterator = iter(dataset)
print(f"loss before={float(tf.reduce_mean((model(x) - y) ** 2)):.4f}", flush=True)
for _ in range(args.steps):
    coordinator.schedule(step, args=(iterator,))  # runs on whichever worker is free
coordinator.join()
print(f"loss after={float(tf.reduce_mean((model(x) - y) ** 2)):.4f}", flush=True)
model.save(os.path.join(os.environ["SM_MODEL_DIR"], "model.keras"))
