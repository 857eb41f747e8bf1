"""sagemaker_training, SageMaker's training toolkit, as far as a training script uses it:
`from sagemaker_training import environment; environment.Environment()`, served to a job's processes
over shipyard's contract (shipyard.contract.environment, which also gives the script its SM_* variables).
The toolkit's launcher side (entry_point, trainer, ...) is shipyard's agent and is not served."""
