"""Strategies, one module each, registered by name. prepare() applies, in `order`, every strategy whose
`wanted(job)` is true; a strategy validates what it needs (degrees, model shape, devices) in `apply` and
raises ValidationError naming the parameter and its valid values before it changes anything.

Order: tensor parallelism and activation checkpointing change the model's layers; then one data-parallel
wrapper (ddp, zero1, fsdp or pipeline: their `wanted` rules exclude each other); then what wraps the
running module (mixed precision, activation offloading) and the optimizer step (gradient accumulation)."""

from __future__ import annotations

from typing import Protocol

from shipyard.parallel.job import Job
from shipyard.registry import Registry

REGISTRY = Registry("parallel_strategies", "parallel strategy", {
    "tensor_parallel": "shipyard.parallel.strategies.tensor_parallel:TensorParallel",
    "activation_checkpointing": "shipyard.parallel.strategies.activation_checkpointing:ActivationCheckpointing",
    "ddp": "shipyard.parallel.strategies.ddp:DataParallel",
    "zero1": "shipyard.parallel.strategies.zero1:Zero1",
    "fsdp": "shipyard.parallel.strategies.fsdp:FullySharded",
    "pipeline": "shipyard.parallel.strategies.pipeline:Pipeline",
    "mixed_precision": "shipyard.parallel.strategies.mixed_precision:MixedPrecision",
    "activation_offloading": "shipyard.parallel.strategies.activation_offloading:ActivationOffloading",
    "gradient_accumulation": "shipyard.parallel.strategies.gradient_accumulation:GradientAccumulation",
})


class Strategy(Protocol):
    name: str
    order: int

    def wanted(self, job: Job) -> bool: ...

    def apply(self, job: Job) -> None: ...


def get(name: str) -> Strategy:
    return REGISTRY.load(name)()


def selected(job: Job) -> list[Strategy]:
    return sorted((s for s in map(get, REGISTRY) if s.wanted(job)), key=lambda s: s.order)
