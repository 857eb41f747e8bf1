"""A SageMaker PyTorch training script as notebooks have them: torchrun's environment (torch_distributed;
one process without it), SM_CHANNEL_TRAIN's CSV, --epochs and --lr from the hyperparameters, the model in
SM_MODEL_DIR."""

import argparse
import os

import numpy as np
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()

distributed = "RANK" in os.environ   # torch_distributed's torchrun sets it; one process without
if distributed:
    dist.init_process_group("gloo")
rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
print(f"rank {rank} of {world} on {os.environ['SM_CURRENT_HOST']}", flush=True)
data = np.loadtxt(os.path.join(os.environ["SM_CHANNEL_TRAIN"], "train.csv"), delimiter=",", dtype=np.float32)
x, y = torch.from_numpy(data[rank::world, 1:]), torch.from_numpy(data[rank::world, :1])
torch.manual_seed(0)
model = torch.nn.Linear(x.shape[1], 1)
model = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
for epoch in range(args.epochs):
    for _ in range(20):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    print(f"epoch={epoch} loss={loss.item():.6f}", flush=True)
if rank == 0:
    torch.save(getattr(model, "module", model).state_dict(), os.path.join(os.environ["SM_MODEL_DIR"], "model.pt"))
if distributed:
    dist.destroy_process_group()
