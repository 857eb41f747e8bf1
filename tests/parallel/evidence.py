"""What the strategies did on this rank, observed on the torch objects prepare() returned, so a test can
tell a strategy that applied from one that silently did not (plain DDP reaches the same numbers).
Used by worker.py and, copied into the job's source_dir, by the e2e job scripts
(tests/e2e/scripts/parallel_train.py); applied.py says what each strategy must leave here.

    seen = Evidence(model, optimizer)          # right after sp.prepare()
    loss = sp.forward_backward(model, x, y, loss_fn)
    seen.after_backward()                      # every micro-batch, before optimizer.step()
    ...
    seen.report()                              # a JSON-able dict"""

from __future__ import annotations

from collections import Counter

import torch
import torch.autograd.graph
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from shipyard.parallel.optimizer import inner

WRAPPERS = {"module", "_checkpoint_wrapped_module", "_fsdp_wrapped_module"}
OFFLOADED: Counter = Counter()  # tensors through save_on_cpu's hooks in this process ("packed", "unpacked")


def plain_name(key: str) -> str:
    """A parameter's or module's name in the unwrapped model (DDP's and the pipeline stage's `module.`,
    the checkpoint wrapper's)."""
    return ".".join(part for part in key.split(".") if part not in WRAPPERS)


class _CountingSaveOnCpu(torch.autograd.graph.save_on_cpu):
    """The real save_on_cpu, counting the tensors its hooks move: on a CPU job the move itself cannot be
    seen (the tensors are in CPU memory already)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        pack, unpack = self.pack_hook, self.unpack_hook

        def counted_pack(tensor):
            packed = pack(tensor)
            OFFLOADED["packed"] += 1
            OFFLOADED[f"from {tensor.device.type} to {packed[1].device.type}"] += 1
            return packed

        def counted_unpack(packed):
            OFFLOADED["unpacked"] += 1
            return unpack(packed)

        self.pack_hook, self.unpack_hook = counted_pack, counted_unpack


def _local(tensor: torch.Tensor) -> list[int]:
    return list(tensor.to_local().shape if isinstance(tensor, DTensor) else tensor.shape)


class Evidence:
    def __init__(self, model: nn.Module, optimizer) -> None:
        self.model = model
        # ZeroRedundancyOptimizer keeps this rank's partition in a local optimizer of the user's class.
        plain = inner(optimizer)
        self.plain = getattr(plain, "optim", plain)
        self.scaler = getattr(optimizer, "scaler", None)
        self.counts: Counter = Counter()
        self.forward_calls: Counter = Counter()  # this micro-batch's
        self.last_forward_calls: dict[str, int] = {}
        self.output_dtypes: set[str] = set()
        self.grads: dict[str, list[int]] | None = None
        self.plain.register_step_post_hook(lambda *_: self.counts.update(["optimizer_steps"]))
        if isinstance(model, DistributedDataParallel):
            model.register_forward_pre_hook(self._count_sync)  # after prepare()'s, which may set the flag
        for name, module in model.named_modules():
            if not any(True for _ in module.children()):
                module.register_forward_pre_hook(self._count_call(plain_name(name)))
                if isinstance(module, nn.Linear):
                    module.register_forward_hook(lambda _m, _args, output: self.output_dtypes.add(str(output.dtype)))
        torch.autograd.graph.save_on_cpu = _CountingSaveOnCpu  # looked up by the strategy at each forward
        OFFLOADED.clear()

    def _count_sync(self, model: DistributedDataParallel, _args) -> None:
        self.counts["synced"] += model.require_backward_grad_sync  # DDP all-reduces in this backward

    def _count_call(self, name: str):
        # A pre-hook: checkpointing's recomputation (a second call in backward) stops inside the forward
        # once it has what backward needs, so a forward hook would miss it.
        def hook(_module, _args):
            self.forward_calls[name] += 1

        return hook

    def after_backward(self) -> None:
        self.counts["micro_batches"] += 1
        # The last micro-batch's, not a total: torch's pipelining adds calls on its first step (it runs
        # the stage to infer the shapes it sends).
        self.last_forward_calls = dict(self.forward_calls)
        self.forward_calls.clear()
        grads = {plain_name(n): p.grad for n, p in self.model.named_parameters()}
        if all(g is not None for g in grads.values()):
            if isinstance(self.model, FSDPModule):
                self.counts["synced"] += 1  # FSDP sets the gradient shards only when it reduce-scattered them
            if self.grads is None:
                self.grads = {n: _local(g) for n, g in grads.items()}

    def report(self) -> dict:
        model = self.model
        names = {id(p): plain_name(n) for n, p in model.named_parameters()}
        params = {}
        for name, p in model.named_parameters():
            mesh = dict(zip(p.device_mesh.mesh_dim_names, p.device_mesh.shape)) if isinstance(p, DTensor) else None
            params[plain_name(name)] = {"local": _local(p), "mesh": mesh}
        stage = getattr(model, "stage", None)
        scaler = self.scaler
        return {
            "params": params,  # the shapes this rank holds, and the device mesh of sharded ones
            "grads": self.grads,  # the same, of the first complete set of gradients
            # per parameter this rank holds optimizer state for: the shapes of its state tensors
            "optimizer_state": {names[id(p)]: [_local(t) for t in state.values()
                                               if isinstance(t, torch.Tensor) and t.dim() > 0]
                                for p, state in self.plain.state.items()},
            "optimizer_steps": self.counts["optimizer_steps"],
            "micro_batches": self.counts["micro_batches"],
            "synced": self.counts["synced"],
            "forward_calls": self.last_forward_calls,
            "checkpointed": sorted(plain_name(n) for n, m in model.named_modules() if isinstance(m, CheckpointWrapper)),
            "output_dtypes": sorted(self.output_dtypes),
            "offloaded": dict(OFFLOADED),
            "scaler": None if scaler is None else {  # scaled: scale() ran (the loss was scaled)
                "scaled": scaler._scale is not None, "scale": scaler.get_scale(),
                "good_steps": int(scaler._get_growth_tracker())},  # steps since the last skipped one
            "pipeline": None if stage is None else {"stage": stage.stage_index},
        }
