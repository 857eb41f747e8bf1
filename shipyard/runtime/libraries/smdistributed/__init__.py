"""`smdistributed`, SageMaker's distributed training libraries, served by shipyard: `dataparallel` (SMDDP)
over torch.distributed, `modelparallel` (SMP v1) over shipyard.parallel."""
