"""Pipeline parallelism (torch.distributed.pipelining): an nn.Sequential is cut into
`pipeline_parallel_degree` stages of consecutive layers, one per rank of a pipeline group; each batch is
split into `microbatches` that flow through the stages so the stages work at the same time. `pipeline`:
`interleaved` (1F1B: each stage alternates forward and backward, fewer activations held) or `simple`
(GPipe: all forwards, then all backwards). Remaining ranks are data-parallel replicas of the pipeline:
each stage's gradients are averaged across its replicas after the step's last micro-batch, one flat
all-reduce (written here because DDP's reducer fails under the schedule's repeated micro-batch backward
passes: "rebuilt parameter indices size is not same as original model parameters size"). For models
too deep for one device.

A pipeline runs forward and backward together, so the script calls
`loss = sp.forward_backward(model, inputs, targets)` instead of `loss_fn(model(inputs), targets).backward()`;
the loss comes back on the last stage (None on the others)."""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from shipyard.errors import ValidationError
from shipyard.parallel.job import Job
from shipyard.parallel.topology import divisors

SCHEDULES = {"interleaved": Schedule1F1B, "simple": ScheduleGPipe}


def split(count: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) ranges of layers, as even as possible (earlier stages get the extra)."""
    size, extra = divmod(count, parts)
    bounds, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


class PipelineModel(nn.Module):
    """This rank's stage; its layers keep their names in the original model, under `module.`."""

    def __init__(self, stage_module: nn.Module, schedule, stage: PipelineStage, replicas=None) -> None:
        super().__init__()
        self.module = stage_module
        self.schedule, self.stage, self.replicas = schedule, stage, replicas

    def forward(self, *args, **kwargs):
        raise TypeError("a pipeline-parallel model runs forward and backward together: "
                        "loss = sp.forward_backward(model, inputs, targets)")

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor | None:
        losses: list[torch.Tensor] = []
        kwargs = {"target": targets, "losses": losses} if self.stage.is_last else {}
        if self.stage.is_first:
            self.schedule.step(inputs, **kwargs)
        else:
            self.schedule.step(**kwargs)
        if self.replicas is not None:
            self._average_gradients()
        return torch.stack(losses).mean().detach() if losses else None


    def _average_gradients(self) -> None:
        grads = [p.grad for p in self.module.parameters() if p.grad is not None]
        flat = _flatten_dense_tensors(grads)
        dist.all_reduce(flat, group=self.replicas)
        flat /= dist.get_world_size(self.replicas)
        for grad, averaged in zip(grads, _unflatten_dense_tensors(flat, grads)):
            grad.copy_(averaged)


class Pipeline:
    name = "pipeline"
    order = 40

    def wanted(self, job: Job) -> bool:
        return job.layout.pp > 1

    def apply(self, job: Job) -> None:
        stages, field, model = job.layout.pp, job.config.field("pipeline_parallel_degree"), job.model
        if not isinstance(model, nn.Sequential):
            raise ValidationError(field, stages, f"splits an nn.Sequential into stages; this model is a "
                                                 f"{type(model).__name__}: express it as nn.Sequential of layers")
        if stages > len(model):
            valid = ", ".join(d for d in divisors(job.layout.world).split(", ") if int(d) <= len(model))
            raise ValidationError(field, stages, f"the model has {len(model)} layers, so at most {len(model)} "
                                                 f"stages; valid values here: {valid}")
        if job.loss_fn is None:
            raise ValidationError("loss_fn", None, "the last pipeline stage computes the loss: "
                                                   "sp.prepare(model, optimizer, loss_fn=...)")
        start, end = split(len(model), stages)[job.layout.pp_rank]
        names = list(model._modules)
        before = job.names()
        part = nn.Sequential(OrderedDict((names[i], model[i]) for i in range(start, end)))
        job.rebind_optimizer(before, part)
        mesh = job.device_mesh()
        stage = PipelineStage(part, job.layout.pp_rank, stages, job.device, group=mesh["pp"].get_group())
        schedule = SCHEDULES[job.config.get("pipeline", "interleaved")](
            stage, n_microbatches=job.config.get("microbatches", 1), loss_fn=job.loss_fn)
        replicas = mesh["dp"].get_group() if job.layout.dp > 1 else None
        job.model, job.compute = PipelineModel(part, schedule, stage, replicas), part
