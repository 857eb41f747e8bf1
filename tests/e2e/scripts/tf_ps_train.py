"""ParameterServerStrategy with the TF_CONFIG SageMaker gives (master/worker/ps, a parameter server
already running on every instance). As SageMaker users do with TF2, the `master` role is renamed
`chief`: the chief coordinates training; a worker serves its task until the chief is done."""

import os
import sys
import time

import tensorflow as tf

import tf_common

config = tf_common.tf_config()
cluster, task = dict(config["cluster"]), dict(config["task"])
cluster["chief"] = cluster.pop("master")
chief = cluster["chief"][0]

if task["type"] == "worker":
    tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="worker", task_index=task["index"], start=True)
    if "--fail-worker" in sys.argv:
        sys.exit("worker failed on purpose")
    deadline = time.monotonic() + 300
    while not tf_common.is_up(chief):  # the chief has not started yet
        if time.monotonic() > deadline:
            sys.exit("the chief never came up")
        time.sleep(0.5)
    while tf_common.is_up(chief):
        time.sleep(0.5)
    tf_common.record()
    sys.exit(0)

resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
    tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc")
strategy = tf.distribute.ParameterServerStrategy(resolver)
x, y = tf_common.data()
with strategy.scope():
    model = tf_common.model()
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)


def loss() -> float:
    return float(tf.reduce_mean((model(x) - y) ** 2))


@tf.function
def step(iterator):
    def replica_step(batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            batch_loss = tf.reduce_mean((model(features, training=True) - labels) ** 2)
        for variable, grad in zip(model.trainable_variables, tape.gradient(batch_loss, model.trainable_variables)):
            variable.assign_sub(0.05 * grad)
        return batch_loss

    return strategy.run(replica_step, args=(next(iterator),))


dataset = coordinator.create_per_worker_dataset(lambda: tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32))
iterator = iter(dataset)
before = loss()
for _ in range(int(os.environ.get("STEPS", "30"))):
    coordinator.schedule(step, args=(iterator,))
coordinator.join()
after = loss()
print(f"loss before={before:.4f} after={after:.4f}", flush=True)
model.save(os.path.join(os.environ["SM_MODEL_DIR"], "model.keras"))
# Which parameter servers hold the variables, e.g. "/job:ps/replica:0/task:1".
placement = sorted({getattr(v, "value", v).device.split("/device:")[0] for v in model.trainable_variables})
tf_common.record(loss_before=before, loss_after=after, variables_on=placement)
