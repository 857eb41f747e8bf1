"""The `smddp` process-group backend of SageMaker distributed data parallel (SMDDP), served by torch's own
collectives: NCCL where this process sees a GPU, gloo where it does not. `register()` makes
`torch.distributed.init_process_group(backend="smddp")` work; `torch.distributed.get_backend()` then
reads "smddp", as on SageMaker, and the group's backend object is a ProcessGroupNCCL or ProcessGroupGloo.

One device type per process, as SMDDP itself: with a GPU, collectives take CUDA tensors (SMDDP cannot
be combined with another backend either). Unlike SMDDP, torch.distributed.new_group() works."""

from __future__ import annotations

import torch
import torch.distributed as dist

NAME = "smddp"


def device_type() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _create(options, _backend_options):
    """The backend object for one group (torch's extended plugin API: `options` carries the store, the
    group's rank and size, its timeout and its global ranks)."""
    if device_type() == "cuda":
        nccl = dist.ProcessGroupNCCL.Options()
        nccl._timeout = options.timeout
        nccl.global_ranks_in_group = options.global_ranks_in_group
        nccl.group_name = options.group_id
        return dist.ProcessGroupNCCL(options.store, options.group_rank, options.group_size, nccl)
    return dist.ProcessGroupGloo(options.store, options.group_rank, options.group_size, options.timeout)


def register() -> None:
    """Idempotent; called by `import smdistributed.dataparallel.torch.torch_smddp`."""
    if NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(NAME, _create, extended_api=True, devices=[device_type()])


def serving(group=None) -> str:
    """The torch backend that carries a group's collectives: "gloo" or "nccl" under smddp, else the
    group's own backend name."""
    backend = dist.get_backend(group)
    if backend != NAME:
        return backend
    served = (group or dist.group.WORLD)._get_backend(torch.device(device_type()))
    return "nccl" if isinstance(served, getattr(dist, "ProcessGroupNCCL", ())) else "gloo"
