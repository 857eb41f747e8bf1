"""SMP v1 for TensorFlow is not served: say so at the import rather than fail later on a missing name."""

raise ImportError("smdistributed.modelparallel.tensorflow (SageMaker model parallel v1 for TensorFlow) is not "
                  "served by shipyard; use smdistributed.modelparallel.torch, or TensorFlow's own strategies "
                  "(distribution={'multi_worker_mirrored_strategy': ...} or 'parameter_server')")
