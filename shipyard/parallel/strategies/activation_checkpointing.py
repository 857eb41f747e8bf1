"""Activation checkpointing: keep only each layer's input in forward and recompute the layer in backward
(torch's non-reentrant checkpoint wrapper around every layer, see shipyard/parallel/layers.py). Trades
about one extra forward for activation memory; for long sequences or deep models."""

from __future__ import annotations

from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing

from shipyard.parallel.job import Job
from shipyard.parallel.layers import layers


class ActivationCheckpointing:
    name = "activation_checkpointing"
    order = 20

    def wanted(self, job: Job) -> bool:
        return bool(job.config.get("activation_checkpointing"))

    def apply(self, job: Job) -> None:
        chosen = {id(layer) for layer in layers(job.model)}
        apply_activation_checkpointing(job.model, check_fn=lambda module: id(module) in chosen)
