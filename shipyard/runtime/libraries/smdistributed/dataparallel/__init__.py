"""`smdistributed.dataparallel` (SMDDP) served by shipyard: `torch.torch_smddp` registers the `smddp`
backend of torch.distributed (gloo on CPUs, NCCL on GPUs; shipyard/parallel/smddp.py), and the API of
SMDDP 1.3 and before (`torch.distributed`, `torch.parallel.DistributedDataParallel`) runs over it.
See docs/sagemaker-libraries-smddp-smp-v2.md."""
