"""`smdistributed.modelparallel`: SageMaker model parallel (SMP) v1, served by shipyard.parallel. PyTorch
only: `import smdistributed.modelparallel.torch as smp`. What works, what differs and what is refused:
docs/sagemaker-libraries-smp-v1.md."""
