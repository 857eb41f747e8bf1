"""Mixed precision: the forward of the running module under torch.autocast, parameters and optimizer
state in float32. `bf16`: bfloat16, needing no loss scaling. `fp16`: float16 with dynamic loss scaling
(GradScaler; ShardedGradScaler when gradients are sharded, so every rank agrees on skipping a step).

The loss is scaled by scaling the gradient that flows into the model's outputs, so the script's plain
`loss.backward()` is a scaled backward; the loss must reach the parameters only through the model's
outputs (add a weight penalty to the optimizer's weight_decay, not to the loss)."""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor
from torch.utils._pytree import tree_leaves

from shipyard.parallel.job import Job
from shipyard.parallel.strategies.hooks import around_forward


def _scaler(job: Job):
    if any(isinstance(p, DTensor) for p in job.model.parameters()):
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(job.device.type)
    return torch.amp.GradScaler(job.device.type)


class MixedPrecision:
    name = "mixed_precision"
    order = 50

    def wanted(self, job: Job) -> bool:
        return bool(job.config.get("bf16") or job.config.get("fp16"))

    def apply(self, job: Job) -> None:
        fp16 = bool(job.config.get("fp16"))
        dtype = torch.float16 if fp16 else torch.bfloat16
        module = job.compute or job.model
        around_forward(module, lambda: torch.autocast(job.device.type, dtype=dtype))
        if fp16:
            optimizer = job.parallel_optimizer()
            optimizer.scaler = scaler = _scaler(job)
            module.register_forward_hook(lambda _m, _args, output: _scale_gradients(output, scaler))


def _scale_gradients(output, scaler) -> None:
    for leaf in tree_leaves(output):
        if isinstance(leaf, torch.Tensor) and leaf.requires_grad:
            leaf.register_hook(scaler.scale)
