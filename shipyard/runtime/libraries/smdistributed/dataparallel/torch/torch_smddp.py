"""`import smdistributed.dataparallel.torch.torch_smddp` makes `backend="smddp"` available to
torch.distributed.init_process_group."""

from shipyard.parallel import smddp

smddp.register()
