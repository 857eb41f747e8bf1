"""Tensor parallelism for Linear layers (torch.distributed.tensor.parallel): each of
`tensor_parallel_degree` ranks holds a slice of every Linear's weight. For layers too wide for one
device's memory or compute.

The plan, Megatron's: two Linear layers with only element-wise modules between them (an MLP) become a
column-parallel layer, whose output stays split by features, then a row-parallel one, whose output is
summed across ranks: one all-reduce per pair. Any other Linear is column-parallel with its output
gathered. Both are exact whatever the surrounding model does. All ranks of a tensor-parallel group must
receive the same inputs; shard() arranges that."""

from __future__ import annotations

from torch import nn
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from shipyard.parallel.job import Job

ELEMENTWISE = (nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.LeakyReLU, nn.Dropout, nn.Identity)


def plan(model: nn.Module) -> dict[str, object]:
    styles: dict[str, object] = {}
    for prefix, module in model.named_modules():
        if not isinstance(module, nn.Sequential):
            continue
        children = list(module.named_children())
        i = 0
        while i < len(children):
            name, child = children[i]
            if isinstance(child, nn.Linear) and f"{prefix}.{name}".lstrip(".") not in styles:
                j = i + 1
                while j < len(children) and isinstance(children[j][1], ELEMENTWISE):
                    j += 1
                if j < len(children) and isinstance(children[j][1], nn.Linear):
                    styles[f"{prefix}.{name}".lstrip(".")] = ColwiseParallel()
                    styles[f"{prefix}.{children[j][0]}".lstrip(".")] = RowwiseParallel()
                    i = j + 1
                    continue
            i += 1
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and name not in styles:
            styles[name] = ColwiseParallel(output_layouts=Replicate())
    return styles


class TensorParallel:
    name = "tensor_parallel"
    order = 10

    def wanted(self, job: Job) -> bool:
        return job.layout.tp > 1

    def apply(self, job: Job) -> None:
        before = job.names()
        parallelize_module(job.model, job.device_mesh()["tp"], plan(job.model))
        job.rebind_optimizer(before)
