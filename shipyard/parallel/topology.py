"""How the ranks are arranged: data-parallel (dp) x pipeline (pp) x tensor-parallel (tp) degrees, and
where this rank sits. `placement_strategy` (SMP's name) decides which ranks form a model-parallel group:
`cluster` puts a group on consecutive ranks (one instance, fast links), `spread` puts consecutive ranks
in different groups. shard() uses the data-parallel coordinates, prepare() the process groups."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from shipyard.errors import ValidationError
from shipyard.parallel.config import ParallelConfig


def divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


@dataclass(frozen=True)
class Layout:
    world: int
    rank: int
    dp: int
    pp: int
    tp: int
    placement: str = "cluster"

    @classmethod
    def of(cls, config: ParallelConfig, world: int, rank: int) -> Layout:
        pp = config.get("pipeline_parallel_degree", 1)
        tp = config.get("tensor_parallel_degree", 1)
        for name, degree in (("pipeline_parallel_degree", pp), ("tensor_parallel_degree", tp)):
            if world % degree:
                raise ValidationError(config.field(name), degree,
                                      f"must divide the world size {world}; valid values: {divisors(world)}")
        if world % (pp * tp):
            raise ValidationError(config.field("tensor_parallel_degree"), tp,
                                  f"pipeline_parallel_degree x tensor_parallel_degree = {pp * tp} must divide the "
                                  f"world size {world}")
        return cls(world, rank, world // (pp * tp), pp, tp, config.get("placement_strategy", "cluster"))

    @cached_property
    def grid(self) -> torch.Tensor:
        """rank ids indexed [dp, pp, tp]."""
        if self.placement == "cluster":
            return torch.arange(self.world).reshape(self.dp, self.pp, self.tp)
        return torch.arange(self.world).reshape(self.pp, self.tp, self.dp).permute(2, 0, 1)

    @cached_property
    def coordinates(self) -> tuple[int, int, int]:
        dp, pp, tp = (self.grid == self.rank).nonzero()[0].tolist()
        return dp, pp, tp

    @property
    def dp_rank(self) -> int:
        return self.coordinates[0]

    @property
    def pp_rank(self) -> int:
        return self.coordinates[1]

    @property
    def tp_rank(self) -> int:
        return self.coordinates[2]

    def mesh(self, device_type: str):
        """The DeviceMesh over (dp, pp, tp); every rank must call this (it creates process groups)."""
        from torch.distributed.device_mesh import DeviceMesh

        return DeviceMesh(device_type, self.grid, mesh_dim_names=("dp", "pp", "tp"))
