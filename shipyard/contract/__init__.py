"""The SageMaker training-container contract: the /opt/ml layout, the config files the platform writes
there, and the SM_* environment the sagemaker-training-toolkit derives from them, reproduced exactly.
Pure functions over plain data; only `Layout.create` and `config.write_configs` touch the disk."""
