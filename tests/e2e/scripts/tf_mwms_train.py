"""MultiWorkerMirroredStrategy across the instances in TF_CONFIG: a Keras model trained with a custom
loop (Keras 3's fit() cannot build a model under a multi-worker strategy); the chief (worker 0) saves
the model to SM_MODEL_DIR, the others to a scratch directory, as TensorFlow asks every worker to save."""

import json
import os
import tempfile

import tensorflow as tf
import keras

import tf_common

BATCH = 32
config = tf_common.tf_config()
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x, y = tf_common.data()
with strategy.scope():
    model = tf_common.model()
    optimizer = keras.optimizers.SGD(0.05)
dataset = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH))


@tf.function
def step(batch):
    def replica_step(features, labels):
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean((model(features, training=True) - labels) ** 2, axis=1)
            batch_loss = tf.nn.compute_average_loss(per_example, global_batch_size=BATCH)
        optimizer.apply_gradients(zip(tape.gradient(batch_loss, model.trainable_variables), model.trainable_variables))
        return batch_loss

    return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)


losses = []
for epoch in range(int(os.environ.get("EPOCHS", "3"))):
    losses.append(sum(float(step(batch)) for batch in dataset) / (tf_common.SAMPLES // BATCH))
    print(f"epoch {epoch} loss={losses[-1]:.4f}", flush=True)
chief = config["task"]["index"] == 0
model.save(os.path.join(os.environ["SM_MODEL_DIR"] if chief else tempfile.mkdtemp(), "model.keras"))
tf_common.record(losses=losses, replicas=strategy.num_replicas_in_sync,
                 weights_digest=float(sum(float(tf.reduce_sum(w)) for w in model.trainable_variables)))
print(json.dumps({"losses": losses}), flush=True)
