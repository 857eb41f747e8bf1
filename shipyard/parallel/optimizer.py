"""The optimizer prepare() returns when a strategy changes what a step means: gradient accumulation (a
real step every k-th call) and fp16 loss scaling (unscale, skip steps with inf/nan gradients). The script
keeps its plain loop: `loss.backward(); optimizer.step(); optimizer.zero_grad()` every micro-batch.

It is a torch Optimizer (LR schedulers accept it) whose param_groups and state are the wrapped one's."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch
from torch.optim import Optimizer

from shipyard.errors import ValidationError


class ParallelOptimizer(Optimizer):
    def __init__(self, optimizer: Optimizer) -> None:  # noqa: D107 - Optimizer.__init__ would re-add params
        self.optimizer = optimizer
        self.accumulation = 1
        self.scaler: torch.amp.GradScaler | None = None
        self.micro_step = 0                 # micro-batches since the last real step
        self._optimizer_step_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_step_post_hooks: OrderedDict = OrderedDict()

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self.optimizer.param_groups

    @property
    def state(self):  # type: ignore[override]
        return self.optimizer.state

    @property
    def defaults(self):  # type: ignore[override]
        return self.optimizer.defaults

    @property
    def last_micro_step(self) -> bool:
        """Whether the micro-batch about to run ends an accumulation window (gradients must be synced)."""
        return self.micro_step == self.accumulation - 1

    def _parameters(self):
        return [p for group in self.param_groups for p in group["params"] if p.grad is not None]

    def step(self, closure=None):
        if closure is not None and self.scaler is not None:
            # GradScaler.step takes no closure: it would be dropped silently and the step taken without it.
            raise ValidationError("closure", getattr(closure, "__qualname__", closure),
                                  "fp16 loss scaling does not take an optimizer.step(closure); "
                                  "call loss.backward() then optimizer.step() with no closure")
        self.micro_step += 1
        if self.micro_step < self.accumulation:
            return None
        self.micro_step = 0
        if self.accumulation > 1:
            # The gradients are sums over k micro-batch means; a mean over the k-times larger batch is 1/k.
            for p in self._parameters():
                p.grad.div_(self.accumulation)
        if self.scaler is None:
            return self.optimizer.step(closure)
        result = self.scaler.step(self.optimizer)
        self.scaler.update()
        return result

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self.micro_step == 0:  # keep accumulating inside a window
            self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def extra_state(self) -> dict[str, Any]:
        """What a checkpoint needs besides the wrapped optimizer's state."""
        return {"micro_step": self.micro_step, "scaler": self.scaler.state_dict() if self.scaler else None}

    def load_extra_state(self, extra: dict[str, Any]) -> None:
        self.micro_step = extra.get("micro_step", 0)
        if self.scaler is not None and extra.get("scaler"):
            self.scaler.load_state_dict(extra["scaler"])

    def __repr__(self) -> str:
        return f"ParallelOptimizer({self.optimizer!r}, accumulation={self.accumulation}, scaler={self.scaler})"


def inner(optimizer: Optimizer | None) -> Optimizer | None:
    return optimizer.optimizer if isinstance(optimizer, ParallelOptimizer) else optimizer


def rebind(optimizer: Optimizer, before: dict[int, str], model: torch.nn.Module) -> Optimizer:
    """A new optimizer of the same class and settings over the model's current parameters. Strategies
    that replace parameters (fully_shard, parallelize_module, pipeline splitting) need it; `before` maps
    id(old parameter) -> its name. Parameters no longer on this rank are dropped."""
    if optimizer.state:
        raise ValidationError("optimizer", type(optimizer).__name__,
                              "has state already; call prepare() before the first optimizer step")
    current = dict(model.named_parameters())
    groups = []
    for group in optimizer.param_groups:
        params = [current[before[id(p)]] for p in group["params"] if before[id(p)] in current]
        if params:
            groups.append({**group, "params": params})
    return type(optimizer)(groups, **optimizer.defaults)
