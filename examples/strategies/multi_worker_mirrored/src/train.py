"""TF2 MultiWorkerMirroredStrategy with the TF_CONFIG shipyard gives under
`multi_worker_mirrored_strategy` (cluster.worker = every host, task = worker/<host's place>): every
instance runs this script, holds a copy of the model, and the gradients are all-reduced each step, so
the copies stay equal. Worker 0 is the chief and saves to SM_MODEL_DIR; the others save to a scratch
directory, as TensorFlow asks every worker to save. Keras 3 cannot build a model under this strategy
with model.fit, hence the custom training loop."""

import argparse
import json
import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=64)  # global: split between the workers
parser.add_argument("--lr", type=float, default=0.05)
args, _ = parser.parse_known_args()

task = json.loads(os.environ["TF_CONFIG"])["task"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG

data = np.load(os.path.join(os.environ["SM_CHANNEL_TRAIN"], "data.npz"))
x, y = data["x"], data["y"]
with strategy.scope():
    model = keras.Sequential([keras.Input((x.shape[1],)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(args.lr)
# Auto-sharding gives each worker its own part of every global batch.
dataset = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch_size))


@tf.function
def step(batch):
    def replica_step(features, labels):
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean((model(features, training=True) - labels) ** 2, axis=1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=args.batch_size)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)


batches = -(-len(x) // args.batch_size)
for epoch in range(args.epochs):
    loss = sum(float(step(batch)) for batch in dataset) / batches
    print(f"epoch={epoch} loss={loss:.4f} (worker {task['index']} of {strategy.num_replicas_in_sync})", flush=True)

chief = task["index"] == 0
model.save(os.path.join(os.environ["SM_MODEL_DIR"] if chief else tempfile.mkdtemp(), "model.keras"))
