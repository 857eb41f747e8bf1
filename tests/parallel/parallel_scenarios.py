"""The equivalence scenarios, shared by the test (single-process reference) and worker.py (the same
training on N ranks through shipyard.parallel). Same model, same seed, same global batches."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

IN, HIDDEN, OUT = 16, 32, 4
STEPS = 4
PER_RANK = 8  # rows per data-parallel rank per micro-batch


@dataclass(frozen=True)
class Scenario:
    name: str
    world: int
    parameters: dict = field(default_factory=dict)
    tolerance: float = 1e-6  # max |distributed - reference| over all parameters after STEPS steps
    optimizer: str = "adam"

    def get(self, key, default=None):
        return self.parameters.get(key, default)

    @property
    def dp(self) -> int:
        return self.world // (self.get("tensor_parallel_degree", 1) * self.get("pipeline_parallel_degree", 1))

    @property
    def accumulation(self) -> int:
        return self.get("gradient_accumulation_steps", 1)

    @property
    def global_batch(self) -> int:
        """Rows per optimizer step, all ranks and micro-batches together."""
        return PER_RANK * self.dp * self.accumulation


# Tolerances: fp32 strategies differ from one process only by the order of floating-point sums
# (all-reduce, reduce-scatter, sharded matmuls): 1e-6 after 4 Adam steps at lr 1e-2 (measured: 5e-8).
# bf16 / fp16 autocast: the same casts on both sides, but each rank's matmuls sum its half of the batch
# in low precision before the fp32 all-reduce; SGD, since Adam's normalisation turns a rounding
# difference in a near-zero gradient into a whole lr-sized step.
SCENARIOS = [
    Scenario("ddp", 2),
    Scenario("zero1", 2, {"shard_optimizer_state": True}),
    Scenario("fsdp", 2, {"hybrid_shard_degree": 2}),
    Scenario("tensor_parallel", 2, {"tensor_parallel_degree": 2}),
    Scenario("pipeline_simple", 2, {"pipeline_parallel_degree": 2, "microbatches": 2, "pipeline": "simple"}),
    Scenario("pipeline_interleaved", 2, {"pipeline_parallel_degree": 2, "microbatches": 4}),
    Scenario("activation_checkpointing", 2, {"activation_checkpointing": True}),
    Scenario("activation_offloading", 2, {"sm_activation_offloading": True, "activation_checkpointing": True}),
    Scenario("bf16", 2, {"bf16": True}, tolerance=1e-3, optimizer="sgd"),
    Scenario("fp16", 2, {"fp16": True}, tolerance=1e-4, optimizer="sgd"),
    Scenario("gradient_accumulation", 2, {"gradient_accumulation_steps": 3}),
    Scenario("fsdp_gradient_accumulation", 2, {"hybrid_shard_degree": 2, "gradient_accumulation_steps": 2}),
    Scenario("hybrid_fsdp", 4, {"hybrid_shard_degree": 2}),
    Scenario("tensor_parallel_fsdp", 4, {"tensor_parallel_degree": 2, "hybrid_shard_degree": 2}),
    Scenario("pipeline_data_parallel_spread", 4,
             {"pipeline_parallel_degree": 2, "microbatches": 2, "placement_strategy": "spread"}),
]
BY_NAME = {s.name: s for s in SCENARIOS}


def model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))


def optimizer(scenario: Scenario, params) -> torch.optim.Optimizer:
    if scenario.optimizer == "sgd":
        return torch.optim.SGD(params, lr=0.1)
    return torch.optim.Adam(params, lr=1e-2)


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(output.float(), target)


def data(scenario: Scenario) -> tuple[torch.Tensor, torch.Tensor]:
    """All rows of all steps, in global order: step s uses rows [s*B, (s+1)*B)."""
    generator = torch.Generator().manual_seed(1)
    rows = scenario.global_batch * STEPS
    return torch.randn(rows, IN, generator=generator), torch.randn(rows, OUT, generator=generator)


def reference(scenario: Scenario) -> dict[str, torch.Tensor]:
    """One process, plain torch, the whole global batch per step."""
    net = model()
    opt = optimizer(scenario, net.parameters())
    x, y = data(scenario)
    dtype = torch.bfloat16 if scenario.get("bf16") else torch.float16 if scenario.get("fp16") else None
    scaler = torch.amp.GradScaler("cpu") if scenario.get("fp16") else None
    b = scenario.global_batch
    for step in range(STEPS):
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            out = net(x[step * b:(step + 1) * b])
        loss = loss_fn(out, y[step * b:(step + 1) * b])
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad()
    return {k: v.detach().clone() for k, v in net.state_dict().items()}
