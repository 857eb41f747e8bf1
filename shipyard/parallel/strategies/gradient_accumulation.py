"""Gradient accumulation: an optimizer step every `gradient_accumulation_steps` micro-batches, the same
update as one batch that many times larger. The script still calls backward, step and zero_grad every
micro-batch; the optimizer prepare() returns does the real step (on the mean gradient) every k-th call,
and gradients are synchronized between ranks only on the k-th micro-batch (DDP's and FSDP's no-sync)."""

from __future__ import annotations

from torch.distributed.fsdp import FSDPModule
from torch.nn.parallel import DistributedDataParallel

from shipyard.parallel.job import Job


class GradientAccumulation:
    name = "gradient_accumulation"
    order = 60

    def wanted(self, job: Job) -> bool:
        return job.config.get("gradient_accumulation_steps", 1) > 1

    def apply(self, job: Job) -> None:
        optimizer = job.parallel_optimizer()
        optimizer.accumulation = job.config.get("gradient_accumulation_steps")
        model = job.model

        def sync_on_last(_module, _args):
            last = optimizer.last_micro_step
            if isinstance(model, DistributedDataParallel):
                model.require_backward_grad_sync = last
            elif isinstance(model, FSDPModule):
                model.set_requires_gradient_sync(last)

        model.register_forward_pre_hook(sync_on_last)
