"""What prepare() hands from one strategy to the next."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from shipyard.parallel.config import ParallelConfig
from shipyard.parallel.optimizer import ParallelOptimizer
from shipyard.parallel.topology import Layout


@dataclass
class Job:
    model: nn.Module                      # what prepare() returns
    optimizer: torch.optim.Optimizer | None
    config: ParallelConfig
    layout: Layout
    device: torch.device
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None
    applied: list[str] = field(default_factory=list)
    # the module that runs forward on this rank (a pipeline stage's part, else the model itself)
    compute: nn.Module | None = None
    mesh: Any = None

    def device_mesh(self):
        if self.mesh is None:
            self.mesh = self.layout.mesh(self.device.type)
        return self.mesh

    def parallel_optimizer(self) -> ParallelOptimizer:
        """The step-changing optimizer wrapper, created by the first strategy that needs it."""
        if self.optimizer is None:
            from shipyard.errors import ValidationError

            raise ValidationError("optimizer", None, "this strategy changes the optimizer step; pass the "
                                                     "optimizer: sp.prepare(model, optimizer)")
        if not isinstance(self.optimizer, ParallelOptimizer):
            self.optimizer = ParallelOptimizer(self.optimizer)
        return self.optimizer

    def names(self) -> dict[int, str]:
        return {id(p): name for name, p in self.model.named_parameters()}

    def rebind_optimizer(self, before: dict[int, str], model: nn.Module | None = None) -> None:
        from shipyard.parallel.optimizer import rebind

        if self.optimizer is not None:
            self.optimizer = rebind(self.optimizer, before, model or self.model)
