"""SageMaker model parallel v2 (SMP v2, `import torch.sagemaker as tsm`) served by shipyard.parallel. An
SMP v2 script builds its model, lets SMP transform it, then wraps it with torch's FSDP itself:

    tsm.init()                       # the job's mp_parameters (SM_HP_MP_PARAMETERS), or a config
    model = tsm.transform(model)     # tensor parallelism (strategies/tensor_parallel.py's plan)
    model = FSDP(model, ...)         # sharded across the data-parallel ranks as hybrid_shard_degree says

SMP v2 makes FSDP shard across the right ranks (those holding the same tensor-parallel slice, in replicas
of hybrid_shard_degree ranks); here init() does it by giving FullyShardedDataParallel that device mesh
when the script passes it no process group or mesh of its own. Ranks are arranged as SMP's: the
tensor-parallel group of rank r is r - r % tp ... + tp - 1, so a script's `rank // tp_size` is its
data-parallel rank.

The parameters applied are SMP v2's: tensor_parallel_degree, hybrid_shard_degree (0, SMP's default:
plain FSDP without tensor parallelism, else every data-parallel rank; 1: no sharding),
sm_activation_offloading and activation_loading_horizon (read by the script through `state`; torch's
offload_wrapper does the offloading), and ddp_dist_backend. What SMP v2 leaves to the script (mixed
precision, activation checkpointing) or does not have (pipelines, ZeRO-1) is refused, since
torch.sagemaker would not apply it; shipyard.parallel.prepare() does."""

from __future__ import annotations

import functools
import inspect
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy

from shipyard.errors import ValidationError
from shipyard.parallel import process_group
from shipyard.parallel.config import ParallelConfig, from_environment
from shipyard.parallel.job import Job
from shipyard.parallel.strategies.fsdp import FullySharded
from shipyard.parallel.strategies.tensor_parallel import TensorParallel
from shipyard.parallel.topology import Layout, divisors
from shipyard.spec import smdistributed

APPLIED = frozenset({"tensor_parallel_degree", "hybrid_shard_degree", "sm_activation_offloading",
                     "activation_loading_horizon", "ddp_dist_backend"})
HYBRID = {ShardingStrategy.FULL_SHARD: ShardingStrategy.HYBRID_SHARD,
          ShardingStrategy.SHARD_GRAD_OP: ShardingStrategy._HYBRID_SHARD_ZERO2}
WHOLE = {hybrid: whole for whole, hybrid in HYBRID.items()}  # one replica: hybrid is plain sharding


class StateError(ValidationError, AttributeError):
    """Also an AttributeError, so getattr(state, name, default) and hasattr() work."""


class State:
    """`torch.sagemaker.state`: this rank's place, set by init() (SMP v2's documented properties)."""

    def __getattr__(self, name: str) -> Any:  # only for attributes init() has not set
        if name.startswith("__"):
            raise AttributeError(name)
        fix = "is not a property torch.sagemaker serves" if _initialized() else "call torch.sagemaker.init() first"
        raise StateError(f"torch.sagemaker.state.{name}", ..., fix)


state = State()


@dataclass(frozen=True)
class Sharding:
    """How FSDP shards when the script gives it no process group: over `mesh` (1-D: every data-parallel
    rank; 2-D: replicate x shard), or not at all (`degree` 1)."""
    mesh: Any
    degree: int
    config: ParallelConfig
    tp: int

    def arguments(self, requested: ShardingStrategy | None, use_orig_params: bool) -> dict[str, Any]:
        field = self.config.field("hybrid_shard_degree")
        if self.degree == 1:
            if requested not in (None, ShardingStrategy.NO_SHARD):
                raise ValidationError("FullyShardedDataParallel.sharding_strategy", requested,
                                      f"{field}=1 means no sharding; leave sharding_strategy out or raise the degree")
            strategy = ShardingStrategy.NO_SHARD
        elif requested == ShardingStrategy.NO_SHARD and self.config.get("hybrid_shard_degree"):
            raise ValidationError("FullyShardedDataParallel.sharding_strategy", requested,
                                  f"conflicts with {field}={self.degree}; leave sharding_strategy out, or set "
                                  "hybrid_shard_degree=1")
        elif self.mesh.ndim == 2:
            strategy = HYBRID.get(requested or ShardingStrategy.FULL_SHARD, requested)
        else:
            strategy = WHOLE.get(requested, requested or ShardingStrategy.FULL_SHARD)
        if use_orig_params and self.tp > 1 and self.mesh.size() == 1:
            # torch's FSDP checks the flattened (local) slice against the tensor-parallel parameter's
            # global shape and fails in the first forward
            raise ValidationError("FullyShardedDataParallel.use_orig_params", True,
                                  f"with tensor_parallel_degree={self.tp} taking every rank, FSDP has one rank to "
                                  "shard across, which torch's FSDP cannot do with use_orig_params=True; pass "
                                  "use_orig_params=False, or run more ranks")
        return {"device_mesh": self.mesh, "sharding_strategy": strategy}


_sharding: list[Sharding | None] = []  # set by init(): [] before it, [None] when FSDP is left as it is
_job: list[Job] = []


def _initialized() -> bool:
    return bool(_job)


def is_initialized() -> bool:
    return _initialized()


def _config(config: str | dict | None) -> ParallelConfig:
    if config is None:
        return from_environment()
    field = "torch.sagemaker.init.config"
    if isinstance(config, str):  # a JSON file, as SageMaker HyperPod passes it
        try:
            config = json.loads(Path(config).read_text())
        except (OSError, ValueError) as error:
            raise ValidationError(field, config, f"must be a readable JSON file of SMP parameters ({error})") from None
    return ParallelConfig(smdistributed.check_parameters(config, field), field)


def init(config: str | dict | None = None) -> None:
    """Join the process group (unless the script created it, e.g. with backend="smddp"), read the SMP
    parameters, check that torch.sagemaker applies each, and arrange the ranks. Idempotent."""
    if _initialized():
        return
    parameters = _config(config)
    for name, value in parameters.parameters.items():
        # ddp: true (also what a dataparallel job sets) is what an FSDP or DDP script does anyway
        if name not in APPLIED and not (name == "ddp" and value is True):
            raise ValidationError(parameters.field(name), value, "is not applied by torch.sagemaker (SMP v2): use "
                                  "torch's own API in the script (FSDP's MixedPrecision, "
                                  "apply_activation_checkpointing), or shipyard.parallel.prepare(), which applies "
                                  "every mp_parameter")
    process_group.init()
    if parameters.get("ddp_dist_backend", "auto") != "auto":
        process_group.choose_backend(parameters)  # nccl without a GPU is an error naming the parameter
    layout = Layout.of(parameters, process_group.world_size(), process_group.rank())
    degree = parameters.get("hybrid_shard_degree", 0)
    if degree and layout.dp % degree:
        raise ValidationError(parameters.field("hybrid_shard_degree"), degree,
                              f"must divide the data-parallel size {layout.dp} (world size / tensor_parallel_degree);"
                              f" valid values: 0, {divisors(layout.dp)}")
    job = Job(nn.Identity(), None, parameters, layout, process_group.device())  # the model comes to transform()
    sharding = None
    if layout.tp > 1 or degree > 1:  # else, as SMP v2, plain FSDP: sharded as the script's arguments say
        if degree == 1:
            mesh = job.device_mesh()["dp"]
        else:
            mesh = FullySharded().mesh(job, degree or layout.dp)
        sharding = Sharding(mesh, degree or layout.dp, parameters, layout.tp)
        _install_fsdp_defaults()
    whole = sharding is None
    state.__dict__.update(
        rank=layout.rank, world_size=layout.world, local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        tensor_parallel_degree=layout.tp, tp_size=layout.tp, tp_rank=layout.tp_rank,
        tp_process_group=None if whole else job.device_mesh()["tp"].get_group(),
        hybrid_shard_degree=degree,
        rep_rank_process_group=None if whole else (sharding.mesh["shard"].get_group() if sharding.mesh.ndim == 2
                                                   else dist.group.WORLD),
        world_process_group=dist.group.WORLD,
        sm_activation_offloading=parameters.get("sm_activation_offloading", False),
        activation_loading_horizon=parameters.get("activation_loading_horizon", 2),
        expert_parallel_degree=1, ep_size=1, ep_rank=0, context_parallel_degree=1, cp_size=1, cp_rank=0,
    )
    _sharding[:] = [sharding]
    _job[:] = [job]


def transform(model: nn.Module, device: torch.device | None = None, dtype: torch.dtype | None = None,
              config: dict | None = None, load_state_dict_from_rank0: bool = False, cp_comm_type: str = "p2p"):
    """The model with its Linear layers split across the tensor-parallel ranks (unchanged with
    tensor_parallel_degree 1), ready for FSDP. `load_state_dict_from_rank0`: every rank starts from rank
    0's weights."""
    if not _initialized():
        raise ValidationError("torch.sagemaker.transform", ..., "call torch.sagemaker.init() first")
    if config is not None:
        raise ValidationError("torch.sagemaker.transform.config", config, "SMP's transformer configurations "
                              "(MoEConfig, ...) are not served: mixture-of-experts needs SMP's own layers; "
                              "leave it out")
    if cp_comm_type not in ("p2p", "all_gather"):
        raise ValidationError("torch.sagemaker.transform.cp_comm_type", cp_comm_type, "must be 'p2p' or 'all_gather'")
    if any(p.is_meta for p in model.parameters()):
        raise ValidationError("torch.sagemaker.transform.model", type(model).__name__,
                              "has parameters on the meta device; delayed parameter initialization is not served: "
                              "create the model with its weights")
    job = _job[0]
    model = model.to(device=device or job.device, dtype=dtype)
    if load_state_dict_from_rank0:
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, 0)
    if job.layout.tp > 1:
        job.model = model
        TensorParallel().apply(job)
    return model


def _install_fsdp_defaults() -> None:
    """FullyShardedDataParallel(...) without process_group or device_mesh shards as init() arranged.
    Installed once per process; a no-op while no arrangement is set."""
    original = FullyShardedDataParallel.__init__
    if getattr(original, "shipyard_smp_v2", False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self, module, *args, **kwargs):
        bound = signature.bind(self, module, *args, **kwargs)
        given = bound.arguments
        sharding = _sharding[0] if _sharding else None
        if sharding is not None and given.get("process_group") is None and given.get("device_mesh") is None:
            given.update(sharding.arguments(given.get("sharding_strategy"), given.get("use_orig_params", False)))
            if given.get("device_id") is None and _job[0].device.type == "cpu":
                given["device_id"] = _job[0].device  # else torch's FSDP looks for a GPU
        original(*bound.args, **bound.kwargs)

    __init__.shipyard_smp_v2 = True
    FullyShardedDataParallel.__init__ = __init__
