"""Fully sharded data parallel (torch `fully_shard`, FSDP2): parameters, gradients and optimizer state
sharded across `hybrid_shard_degree` ranks, gathered layer by layer for compute. With a degree below the
data-parallel size it is hybrid (HSDP): shard within groups of that many ranks, replicate across groups,
so the all-gathers stay inside a group (an instance) and only gradients cross groups."""

from __future__ import annotations

from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

from shipyard.errors import ValidationError
from shipyard.parallel.job import Job
from shipyard.parallel.layers import layers
from shipyard.parallel.topology import divisors


class FullySharded:
    name = "fsdp"
    order = 40

    def wanted(self, job: Job) -> bool:
        return job.config.get("hybrid_shard_degree", 0) > 0 and job.layout.pp == 1

    def mesh(self, job: Job, degree: int):
        layout = job.layout
        if layout.tp > 1:
            if degree != layout.dp:
                raise ValidationError(job.config.field("hybrid_shard_degree"), degree,
                                      f"with tensor parallelism, shard across all {layout.dp} data-parallel ranks: "
                                      f"hybrid_shard_degree={layout.dp}")
            return job.device_mesh()["dp"]
        ranks = layout.grid[:, 0, 0]
        if degree == layout.dp:
            return DeviceMesh(job.device.type, ranks, mesh_dim_names=("shard",))
        return DeviceMesh(job.device.type, ranks.reshape(layout.dp // degree, degree),
                          mesh_dim_names=("replicate", "shard"))

    def apply(self, job: Job) -> None:
        degree = job.config.get("hybrid_shard_degree")
        if job.layout.dp % degree:
            raise ValidationError(job.config.field("hybrid_shard_degree"), degree,
                                  f"must divide the data-parallel size {job.layout.dp}; valid values: "
                                  f"{divisors(job.layout.dp)}")
        mesh = self.mesh(job, degree)
        before = job.names()
        for layer in layers(job.model):
            if any(True for _ in layer.parameters()):
                fully_shard(layer, mesh=mesh)
        fully_shard(job.model, mesh=mesh)
        job.rebind_optimizer(before)
