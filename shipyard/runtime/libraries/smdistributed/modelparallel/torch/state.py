"""smp.init() and where this process sits: SMP v1's ranks, sizes, communication groups and primitives,
over shipyard.parallel's arrangement (Layout) of the job's mp_parameters.

SMP v1 counts tensor-parallel ranks among the data-parallel ones (dp_size = size / pp_size, with
rdp_size = dp_size / tp_size: each tensor-parallel rank reads its own batch, which SMP's distributed
modules gather). shipyard's tensor parallelism needs every rank of a tensor-parallel group to read the
same batch, so here `dp_*` is the number of model replicas, the same as `rdp_*`: a script that shards
its data by smp.dp_rank() feeds each group one batch and its result is exact."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from shipyard.errors import ValidationError
from shipyard.parallel import process_group
from shipyard.parallel.config import ParallelConfig, from_environment
from shipyard.parallel.topology import Layout


class CommGroup(enum.Enum):
    WORLD = "world"
    MP_GROUP = "mp"      # the ranks that together hold one replica of the model (pp x tp)
    DP_GROUP = "dp"      # the ranks that hold the same part of the model (its replicas)
    PP_GROUP = "pp"
    TP_GROUP = "tp"
    RDP_GROUP = "rdp"    # the same ranks as DP_GROUP here (see the module's docstring)


class RankType(enum.Enum):
    WORLD_RANK = CommGroup.WORLD
    MP_RANK = CommGroup.MP_GROUP
    DP_RANK = CommGroup.DP_GROUP
    PP_RANK = CommGroup.PP_GROUP
    TP_RANK = CommGroup.TP_GROUP
    RDP_RANK = CommGroup.RDP_GROUP


@dataclass
class State:
    config: ParallelConfig
    layout: Layout
    groups: dict[CommGroup, tuple[Any, list[int]]]   # this rank's (process group, its global ranks)
    model: Any = None                                 # the one smp.DistributedModel
    optimizer: Any = None                             # the one smp.DistributedOptimizer


_state: State | None = None


def _groups(layout: Layout) -> dict[CommGroup, tuple[Any, list[int]]]:
    """Every kind of group, created on every rank in the same order (new_group is collective)."""
    grid = layout.grid  # [dp, pp, tp] -> global rank
    dp, pp, tp = grid.shape
    members = {
        CommGroup.DP_GROUP: [grid[:, p, t].tolist() for p in range(pp) for t in range(tp)],
        CommGroup.PP_GROUP: [grid[d, :, t].tolist() for d in range(dp) for t in range(tp)],
        CommGroup.TP_GROUP: [grid[d, p, :].tolist() for d in range(dp) for p in range(pp)],
        CommGroup.MP_GROUP: [grid[d].flatten().tolist() for d in range(dp)],
    }
    groups = {CommGroup.WORLD: (dist.group.WORLD, list(range(layout.world)))}
    for kind, lists in members.items():
        mine, _ = dist.new_subgroups_by_enumeration(lists)
        groups[kind] = (mine, next(ranks for ranks in lists if layout.rank in ranks))
    groups[CommGroup.RDP_GROUP] = groups[CommGroup.DP_GROUP]
    return groups


def init() -> None:
    """Join the job's process group (mpirun's or torchrun's ranks) and arrange the ranks as the job's
    mp_parameters say. Idempotent."""
    global _state
    if _state is not None:
        return
    config = from_environment()
    process_group.init()
    layout = Layout.of(config, process_group.world_size(), process_group.rank())
    averaged = layout.pp > 1 or config.get("hybrid_shard_degree") or config.get("shard_optimizer_state")
    if layout.dp > 1 and config.get("ddp") is False and not averaged:
        # Nothing would average the replicas' gradients: they would train apart, silently.
        raise ValidationError(config.field("ddp"), False, f"{layout.world} ranks with pipeline_parallel_degree x "
                              f"tensor_parallel_degree = {layout.pp * layout.tp} make {layout.dp} model replicas, "
                              "whose gradients nothing else averages: set ddp: true, or raise the degrees")
    _state = State(config, layout, _groups(layout))


def is_initialized() -> bool:
    return _state is not None


def get(call: str) -> State:
    if _state is None:
        raise ValidationError(call, ..., "call smp.init() first, at the top of the training script")
    return _state


def rank() -> int:
    return get("smp.rank").layout.rank


def size() -> int:
    return get("smp.size").layout.world


def local_rank() -> int:
    get("smp.local_rank")
    return int(os.environ.get("LOCAL_RANK", "0"))  # process_group.init() sets it from mpirun's variables too


def local_size() -> int:
    get("smp.local_size")
    return int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or 1)


def dp_rank() -> int:
    return get("smp.dp_rank").layout.dp_rank


def dp_size() -> int:
    return get("smp.dp_size").layout.dp


def pp_rank() -> int:
    return get("smp.pp_rank").layout.pp_rank


def pp_size() -> int:
    return get("smp.pp_size").layout.pp


def tp_rank() -> int:
    return get("smp.tp_rank").layout.tp_rank


def tp_size() -> int:
    return get("smp.tp_size").layout.tp


def mp_rank() -> int:
    layout = get("smp.mp_rank").layout
    return layout.pp_rank * layout.tp + layout.tp_rank


def mp_size() -> int:
    layout = get("smp.mp_size").layout
    return layout.pp * layout.tp


rdp_rank, rdp_size = dp_rank, dp_size


def _group(group: CommGroup, call: str) -> tuple[Any, list[int]]:
    if not isinstance(group, CommGroup):
        raise ValidationError(f"{call}.group", group,
                              f"must be an smp.CommGroup: {', '.join(g.name for g in CommGroup)}")
    return get(call).groups[group]


def process_group_of(group: CommGroup):
    return _group(group, "smp.get_process_group")[0]


def get_world_process_group():
    return process_group_of(CommGroup.WORLD)


def get_mp_process_group():
    return process_group_of(CommGroup.MP_GROUP)


def get_dp_process_group():
    return process_group_of(CommGroup.DP_GROUP)


def get_pp_process_group():
    return process_group_of(CommGroup.PP_GROUP)


def get_tp_process_group():
    return process_group_of(CommGroup.TP_GROUP)


def get_rdp_process_group():
    return process_group_of(CommGroup.RDP_GROUP)


def get_mp_group() -> list[int]:
    return _group(CommGroup.MP_GROUP, "smp.get_mp_group")[1]


def get_dp_group() -> list[int]:
    return _group(CommGroup.DP_GROUP, "smp.get_dp_group")[1]


def barrier(group: CommGroup = CommGroup.WORLD) -> None:
    dist.barrier(group=_group(group, "smp.barrier")[0])


def dp_barrier() -> None:
    barrier(CommGroup.DP_GROUP)


def mp_barrier() -> None:
    barrier(CommGroup.MP_GROUP)


def allgather(obj: Any, group: CommGroup) -> list[Any]:
    process, ranks = _group(group, "smp.allgather")
    gathered: list[Any] = [None] * len(ranks)
    dist.all_gather_object(gathered, obj, group=process)
    return gathered


def _global_rank(peer: int, rank_type: RankType, call: str) -> int:
    if not isinstance(rank_type, RankType):
        raise ValidationError(f"{call}.rank_type", rank_type,
                              f"must be an smp.RankType: {', '.join(r.name for r in RankType)}")
    ranks = _group(rank_type.value, call)[1]
    if not 0 <= peer < len(ranks):
        raise ValidationError(call, peer, f"must be a {rank_type.name} below {len(ranks)}")
    return ranks[peer]


def send(obj: Any, dest_rank: int, rank_type: RankType) -> None:
    dist.send_object_list([obj], dst=_global_rank(dest_rank, rank_type, "smp.send"))


def recv_from(src_rank: int, rank_type: RankType) -> Any:
    box: list[Any] = [None]
    dist.recv_object_list(box, src=_global_rank(src_rank, rank_type, "smp.recv_from"))
    return box[0]


def broadcast(obj: Any, group: CommGroup) -> None:
    """Send `obj` to every other rank of `group`; each receives it with smp.recv_from (SMP's pairing)."""
    me = rank()
    for peer in _group(group, "smp.broadcast")[1]:
        if peer != me:
            dist.send_object_list([obj], dst=peer)
