"""torchrun, 2 instances: the rank on algo-2 prints framework-like noise, then fails in a function of
its own; the rank on algo-1 waits in an all-reduce and loses its peer."""

import os

import torch
import torch.distributed as dist

import framework_noise


def load_labels(step: int) -> None:
    framework_noise.emit()
    raise KeyError(f"label column missing at step {step}")


dist.init_process_group("gloo")
dist.barrier()
if os.environ["SM_CURRENT_HOST"] == "algo-2":
    load_labels(3)
dist.all_reduce(torch.ones(1))
