"""SageMaker's API (AWS JSON 1.1, `X-Amz-Target: SageMaker.<Operation>`) over shipyard's training and tuning
jobs: what the real `sagemaker` SDK and boto3 call for Estimator.fit, HyperparameterTuner.fit, attach, logs and
analytics (docs/sagemaker-api.md)."""

from shipyard.server.aws.sagemaker import training, tuning

OPERATIONS = {**training.OPERATIONS, **tuning.OPERATIONS}
