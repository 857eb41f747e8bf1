"""`smdistributed.dataparallel.torch.parallel.DistributedDataParallel` (SMDDP before 1.4)."""

from smdistributed.dataparallel.torch.parallel.distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
