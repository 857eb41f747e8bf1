"""A DeepSpeed script as users write it for SageMaker's torch_distributed: deepspeed.initialize reads
the variables torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT) and forms the process group
itself, on whatever accelerator DeepSpeed finds (CUDA with NCCL, else its CPU accelerator with gloo). Writes,
per rank, its final parameters and losses so the test can compare ranks, and its device and backend."""

import argparse
import json
import os

import deepspeed
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--zero_stage", type=int, default=2)
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
config = {
    "train_micro_batch_size_per_gpu": 16,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "SGD", "params": {"lr": 0.2}},
    "zero_optimization": {"stage": args.zero_stage},
    "zero_allow_untested_optimizer": True,
}
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
rank, world = dist.get_rank(), dist.get_world_size()
generator = torch.Generator().manual_seed(100 + rank)   # each rank its own data
target = torch.nn.Linear(8, 1)
losses = []
for step in range(args.steps):
    x = torch.randn(16, 8, generator=generator)
    y = target(x).detach()
    loss = torch.nn.functional.mse_loss(engine(x.to(engine.device)), y.to(engine.device))
    engine.backward(loss)
    engine.step()
    losses.append(loss.item())
    print(f"step={step} rank={rank} loss={loss.item():.5f}", flush=True)
params = [p.detach().flatten().tolist() for p in engine.module.parameters()]
record = {"rank": rank, "world": world, "host": os.environ["SM_CURRENT_HOST"], "losses": losses, "params": params,
          "zero_stage": engine.zero_optimization_stage(), "local_rank": int(os.environ["LOCAL_RANK"]),
          "device": str(engine.device), "backend": dist.get_backend()}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank-{rank}.json"), "w") as f:
    json.dump(record, f)
