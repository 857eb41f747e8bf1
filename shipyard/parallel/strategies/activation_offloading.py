"""Activation offloading: tensors saved for backward go to CPU memory during forward and come back in
backward (torch.autograd.graph.save_on_cpu). For GPU jobs whose activations do not fit, at the cost of
host-device copies; with activation checkpointing only the checkpointed inputs are saved, so far less
moves. On a CPU job it changes nothing (the activations are in CPU memory already).

SMP's `activation_loading_horizon` (how many layers ahead to prefetch) is accepted but has no effect:
save_on_cpu copies each tensor back when backward needs it."""

from __future__ import annotations

import torch

from shipyard.parallel.job import Job
from shipyard.parallel.strategies.hooks import around_forward


class ActivationOffloading:
    name = "activation_offloading"
    order = 50

    def wanted(self, job: Job) -> bool:
        return bool(job.config.get("sm_activation_offloading"))

    def apply(self, job: Job) -> None:
        pin = job.device.type == "cuda"
        around_forward(job.compute or job.model, lambda: torch.autograd.graph.save_on_cpu(pin_memory=pin))
