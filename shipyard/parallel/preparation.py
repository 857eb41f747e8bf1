"""prepare(): apply the job's configured strategies to a model and its optimizer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from shipyard.errors import ValidationError
from shipyard.parallel import process_group
from shipyard.parallel.config import from_environment
from shipyard.parallel.job import Job
from shipyard.parallel.strategies import selected
from shipyard.parallel.topology import Layout


_prepared: list[Layout] = []  # the arrangement the last prepare() used, which shard() follows


def layout(**parameters: Any) -> Layout:
    """This rank's place in the (dp, pp, tp) arrangement: the last prepare()'s, else the job's
    configuration with `parameters` overriding it."""
    process_group.init()
    if _prepared and not parameters:
        return _prepared[-1]
    config = from_environment().with_overrides(parameters)
    return Layout.of(config, process_group.world_size(), process_group.rank())


def prepare(model: nn.Module, optimizer: torch.optim.Optimizer | None = None, *,
            loss_fn: Callable[[Any, Any], torch.Tensor] | None = None, **parameters: Any):
    """(model, optimizer) with the job's strategies applied. `parameters` are mp_parameters names
    (e.g. hybrid_shard_degree=2, bf16=True) overriding the job's configuration. Call it after init() and
    before the first optimizer step, with the optimizer built over model.parameters()."""
    process_group.init()
    config = from_environment().with_overrides(parameters)
    device = process_group.device()
    job = Job(model.to(device), optimizer, config, Layout.of(config, process_group.world_size(),
                                                               process_group.rank()), device, loss_fn)
    requested = config.get("ddp_dist_backend", "auto")
    if requested != "auto":
        process_group.choose_backend(config)  # nccl on a job without a GPU is an error naming the parameter
        if requested != _backend():
            raise ValidationError(config.field("ddp_dist_backend"), requested,
                                  f"the process group was initialised with {_backend()}; set it in the job's "
                                  "mp_parameters, or call sp.init(backend=...) first")
    _prepared[:] = [job.layout]
    for strategy in selected(job):
        strategy.apply(job)
        job.applied.append(strategy.name)
    job.model.shipyard_strategies = tuple(job.applied)
    return job.model, job.optimizer


def _backend() -> str:
    return torch.distributed.get_backend()


def forward_backward(model: nn.Module, inputs: Any, targets: Any,
                     loss_fn: Callable[[Any, Any], torch.Tensor] | None = None) -> torch.Tensor | None:
    """One micro-batch's forward and backward under any strategy; returns the (detached) loss, or None on
    pipeline stages other than the last. Pipeline parallelism needs it; the others also accept the
    plain `loss_fn(model(inputs), targets).backward()`."""
    from shipyard.parallel.strategies.pipeline import PipelineModel

    if isinstance(model, PipelineModel):
        return model.step(inputs, targets)
    if loss_fn is None:
        raise ValidationError("loss_fn", None, "pass the loss function: sp.forward_backward(model, x, y, loss_fn)")
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    return loss.detach()
