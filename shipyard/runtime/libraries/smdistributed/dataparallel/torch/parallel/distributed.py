"""SMDDP's DistributedDataParallel (before 1.4) is torch's, over the default process group that
`smdistributed.dataparallel.torch.distributed.init_process_group()` created with the smddp backend. Its
signature is a superset of SMDDP's (module, device_ids, output_device, broadcast_buffers, process_group,
bucket_cap_mb), and no_sync() works as SMDDP 1.2.2 documents it."""

from torch.nn.parallel import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
