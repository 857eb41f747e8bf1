"""ZeRO stage 1: gradients all-reduced as in DDP, but each rank keeps the optimizer state of only
1/N of the parameters (ZeroRedundancyOptimizer), updates those, and broadcasts them. For models that
fit on one device whose optimizer state (2x the parameters for Adam) does not fit N times over."""

from __future__ import annotations

from torch.distributed.optim import ZeroRedundancyOptimizer

from shipyard.errors import ValidationError
from shipyard.parallel.job import Job
from shipyard.parallel.strategies.ddp import data_parallel_group, wrap


class Zero1:
    name = "zero1"
    order = 40

    def wanted(self, job: Job) -> bool:
        return bool(job.config.get("shard_optimizer_state")) and job.layout.pp == 1

    def apply(self, job: Job) -> None:
        optimizer = job.optimizer
        if optimizer is None:
            raise ValidationError("optimizer", None, "shard_optimizer_state shards the optimizer: "
                                                     "pass it, sp.prepare(model, optimizer)")
        if optimizer.state:
            raise ValidationError("optimizer", type(optimizer).__name__,
                                  "has state already; call prepare() before the first optimizer step")
        job.model = wrap(job, job.model)
        first, *rest = optimizer.param_groups
        zero = ZeroRedundancyOptimizer(
            first["params"], optimizer_class=type(optimizer), process_group=data_parallel_group(job),
            **{k: v for k, v in first.items() if k != "params"},
        )
        for group in rest:
            zero.add_param_group(group)
        job.optimizer = zero
