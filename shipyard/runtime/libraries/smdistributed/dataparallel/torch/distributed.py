"""`import smdistributed.dataparallel.torch.distributed as dist`: SMDDP's API before 1.4, which SageMaker
deprecated for torch.distributed with backend="smddp". Here it is that: init_process_group() creates
torch's default process group with the smddp backend (shipyard/parallel/smddp.py), so these functions
and torch.distributed's act on the same group and mix freely.

Differences: `group` may be any torch process group (SMDDP accepts only group.WORLD), and
ReduceOp.AVERAGE over gloo (no GPU) sums then divides, synchronously."""

from __future__ import annotations

import os

import torch.distributed as _dist

from shipyard.errors import ValidationError
from shipyard.parallel import smddp
from shipyard.runtime import process_group_exit

group = _dist.group
is_initialized = _dist.is_initialized


class ReduceOp:
    SUM = _dist.ReduceOp.SUM
    MIN = _dist.ReduceOp.MIN
    MAX = _dist.ReduceOp.MAX
    AVERAGE = _dist.ReduceOp.AVG


def is_available() -> bool:
    """Whether this process was started as one rank of a distributed job (by torchrun here)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def init_process_group(backend: str | None = None, timeout=None) -> None:
    """Join the job's process group with the smddp backend. Idempotent."""
    call = "smdistributed.dataparallel.torch.distributed.init_process_group"
    if backend not in (None, smddp.NAME):
        raise ValidationError(f"{call}.backend", backend, "SMDDP's process group is always 'smddp'; leave it out")
    if _dist.is_initialized():
        return
    if not is_available():
        raise ValidationError(call, ..., "this process was not started as a rank of a distributed job (no RANK and "
                                         "WORLD_SIZE in its environment): run it with distribution={'smdistributed': "
                                         "{'dataparallel': {'enabled': True}}}, or check is_available() first")
    process_group_exit.install(at_start=False)  # as shipyard.parallel.init(): scripts run outside a job too
    smddp.register()
    _dist.init_process_group(backend=smddp.NAME, **({} if timeout is None else {"timeout": timeout}))


def get_world_size(group=None) -> int:
    return _dist.get_world_size(group)


def get_rank(group=None) -> int:
    return _dist.get_rank(group)


def get_local_rank() -> int:
    """This process's rank among the job's processes on its instance."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def get_local_size() -> int:
    """The number of the job's processes on this instance."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    if op == ReduceOp.AVERAGE and smddp.serving(group) == "gloo":  # gloo has no AVG
        if async_op:
            raise ValidationError("all_reduce.async_op", async_op, "ReduceOp.AVERAGE without a GPU (gloo) runs "
                                                                  "synchronously here; pass async_op=False")
        _dist.all_reduce(tensor, ReduceOp.SUM, group)
        tensor.div_(_dist.get_world_size(group))
        return None
    return _dist.all_reduce(tensor, op, group, async_op)


def broadcast(tensor, src=0, group=None, async_op=False):
    return _dist.broadcast(tensor, src, group, async_op)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    return _dist.all_gather(tensor_list, tensor, group, async_op)


def all_to_all_single(output_t, input_t, output_split_sizes=None, input_split_sizes=None, group=None,
                      async_op=False):
    return _dist.all_to_all_single(output_t, input_t, output_split_sizes, input_split_sizes, group, async_op)


def barrier(group=None, async_op=False):
    return _dist.barrier(group, async_op)
