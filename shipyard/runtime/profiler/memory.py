"""The model's size and one step's activations, measured inside a training process for `shipyard plan
--calibrate` (the job's environment has SHIPYARD_PROFILER_MEMORY_STEP=<step>): the parameters of the
model being trained (the root module phases.py sees), and the bytes autograd saves for the backward pass
during that step (its activations: each storage once, the weights not). Written whole to
framework/memory/<node>-rank<rank>.json under the profiler's directory, which the profiler's own
reader does not read; sdk/calibrate.py does."""

from __future__ import annotations

import json
import os

ENV_STEP = "SHIPYARD_PROFILER_MEMORY_STEP"
MEMORY_DIR = "framework/memory"


class MemoryProbe:
    def __init__(self, recorder, step: int) -> None:
        self.r, self.step = recorder, step
        self.storages: dict[int, int] = {}   # data pointer -> bytes of each storage saved for backward
        self.weights: set[int] = set()
        self.parameters = 0
        self.context = None

    def step_starts(self, step: int) -> None:
        if step != self.step or self.context is not None:
            return
        import torch

        root = self.r.phases.root() if self.r.phases.root is not None else None
        if root is not None:
            params = list(root.parameters())
            self.parameters = sum(p.numel() for p in params)
            self.weights = {p.untyped_storage().data_ptr() for p in params}
        self.context = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda saved: saved)
        self.context.__enter__()

    def _pack(self, tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in self.weights:
            self.storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    def step_ends(self, step: int) -> None:
        if step != self.step or self.context is None:
            return
        self.context.__exit__(None, None, None)
        directory = os.path.join(self.r.root, MEMORY_DIR)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{self.r.node}-rank{self.r.rank}.json")
        with open(path + ".tmp", "w") as f:
            json.dump({"step": step, "parameters": self.parameters,
                       "activation_bytes": sum(self.storages.values())}, f)
        os.replace(path + ".tmp", path)
