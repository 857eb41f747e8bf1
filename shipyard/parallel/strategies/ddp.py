"""Data parallel: every rank holds the whole model and optimizer; DistributedDataParallel all-reduces
(averages) gradients during backward. The default with more than one data-parallel rank."""

from __future__ import annotations

from torch.nn.parallel import DistributedDataParallel

from shipyard.errors import ValidationError
from shipyard.parallel.job import Job


def data_parallel_group(job: Job):
    """The process group of this rank's data-parallel replicas (None: the whole world)."""
    return None if job.layout.dp == job.layout.world else job.device_mesh()["dp"].get_group()


def wrap(job: Job, module):
    device_ids = [job.device.index] if job.device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=device_ids, process_group=data_parallel_group(job))


class DataParallel:
    name = "ddp"
    order = 40

    def wanted(self, job: Job) -> bool:
        c = job.config
        return (job.layout.dp > 1 and c.get("ddp", True) and job.layout.pp == 1
                and not c.get("hybrid_shard_degree") and not c.get("shard_optimizer_state"))

    def apply(self, job: Job) -> None:
        if job.layout.tp > 1:
            raise ValidationError(job.config.field("tensor_parallel_degree"), job.layout.tp,
                                  f"leaves {job.layout.dp} data-parallel replicas, which tensor-parallel parameters "
                                  f"need FSDP for: also set hybrid_shard_degree={job.layout.dp}, or "
                                  f"tensor_parallel_degree={job.layout.world}")
        job.model = wrap(job, job.model)
