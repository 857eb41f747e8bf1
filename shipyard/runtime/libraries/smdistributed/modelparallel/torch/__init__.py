"""`import smdistributed.modelparallel.torch as smp`: SageMaker model parallel v1's PyTorch API over
shipyard.parallel. The strategy comes from the job's mp_parameters
(`distribution={"smdistributed": {"modelparallel": {"enabled": True, "parameters": {...}}}}`):

    smp.init()
    model = smp.DistributedModel(model)              # partitioned at the first step
    optimizer = smp.DistributedOptimizer(optimizer)

    @smp.step
    def train_step(model, data, target):             # runs once per micro-batch
        loss = F.mse_loss(model(data), target)
        model.backward(loss)
        return loss

    loss = train_step(model, data, target).reduce_mean()
    optimizer.step()

SMP names shipyard does not serve raise an error saying so rather than an AttributeError; what differs
from SMP: docs/sagemaker-libraries-smp-v1.md."""

from __future__ import annotations

from shipyard.errors import ValidationError

from .checkpoint import load, resume_from_checkpoint, save, save_checkpoint
from .model import DistributedModel, DistributedOptimizer, model_creation, tensor_parallelism
from .state import (CommGroup, RankType, allgather, barrier, broadcast, dp_barrier, dp_rank, dp_size,
                    get_dp_group, get_dp_process_group, get_mp_group, get_mp_process_group, get_pp_process_group,
                    get_rdp_process_group, get_tp_process_group, get_world_process_group, init, is_initialized,
                    local_rank, local_size, mp_barrier, mp_rank, mp_size, pp_rank, pp_size, rank, rdp_rank,
                    rdp_size, recv_from, send, size, tp_rank, tp_size)
from .step import StepOutput, step

WORLD, MP_GROUP, DP_GROUP = CommGroup.WORLD, CommGroup.MP_GROUP, CommGroup.DP_GROUP
PP_GROUP, TP_GROUP, RDP_GROUP = CommGroup.PP_GROUP, CommGroup.TP_GROUP, CommGroup.RDP_GROUP
WORLD_RANK, MP_RANK, DP_RANK = RankType.WORLD_RANK, RankType.MP_RANK, RankType.DP_RANK

# SMP v1 names that are not served, and why (an error names them instead of a bare AttributeError).
NOT_SERVED = {
    "partition": "manual placement is not served: shipyard cuts an nn.Sequential into `partitions` stages of "
                 "consecutive layers (equal counts)",
    "set_partition": "manual placement is not served: shipyard cuts an nn.Sequential into equal stages",
    "set_tensor_parallelism": "shipyard splits every nn.Linear when tensor_parallel_degree > 1; per-module "
                              "choices are not served",
    "delay_param_initialization": "delayed parameter initialization is not served; create the model normally",
    "amp": "smp.amp.GradScaler is not served: set fp16 in the job's mp_parameters (dynamic loss scaling)",
    "nn": "SMP's distributed modules (smp.nn) are not served; tensor_parallel_degree splits nn.Linear layers",
    "optimizers": "SMP's fused optimizers (smp.optimizers) are not served; use torch.optim",
    "set_activation_checkpointing": "per-module activation checkpointing is not served; set "
                                    "activation_checkpointing: true in mp_parameters (every layer)",
    "reset": "smp.reset() is not served; a script partitions one model",
}


def __getattr__(name: str):
    if name in NOT_SERVED:
        raise ValidationError(f"smp.{name}", ..., f"{NOT_SERVED[name]} (docs/sagemaker-libraries-smp-v1.md)")
    raise AttributeError(f"module 'smdistributed.modelparallel.torch' has no attribute {name!r}")


__all__ = ["CommGroup", "DP_GROUP", "DP_RANK", "DistributedModel", "DistributedOptimizer", "MP_GROUP", "MP_RANK",
           "PP_GROUP", "RDP_GROUP", "RankType", "StepOutput", "TP_GROUP", "WORLD", "WORLD_RANK", "allgather",
           "barrier", "broadcast", "dp_barrier", "dp_rank", "dp_size", "get_dp_group", "get_dp_process_group",
           "get_mp_group", "get_mp_process_group", "get_pp_process_group", "get_rdp_process_group",
           "get_tp_process_group", "get_world_process_group", "init", "is_initialized", "load", "local_rank",
           "local_size", "model_creation", "mp_barrier", "mp_rank", "mp_size", "pp_rank", "pp_size", "rank",
           "rdp_rank", "rdp_size", "recv_from", "resume_from_checkpoint", "save", "save_checkpoint", "send", "size",
           "step", "tensor_parallelism", "tp_rank", "tp_size"]
