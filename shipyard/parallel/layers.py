"""Which submodules are "the layers" of a model: the unit of FSDP sharding and of activation
checkpointing. The children of the largest nn.Sequential / nn.ModuleList in the model (the model itself
when it is one): a transformer's blocks, an MLP's layers."""

from __future__ import annotations

from torch import nn


def layers(model: nn.Module) -> list[nn.Module]:
    containers = [m for m in model.modules() if isinstance(m, (nn.Sequential, nn.ModuleList))]
    if not containers:
        return []
    largest = max(containers, key=len)
    return list(largest)
