"""SMDDP for TensorFlow is discontinued by SageMaker, and not served."""

raise ImportError("smdistributed.dataparallel.tensorflow is not served: SageMaker discontinued SMDDP for "
                  "TensorFlow; use distribution={'multi_worker_mirrored_strategy': {'enabled': True}} and "
                  "tf.distribute.MultiWorkerMirroredStrategy instead")
