"""Plain PyTorch DDP, as written for torchrun: nothing shipyard- or SageMaker-specific beyond the
SM_* paths. torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT on every process,
so init_process_group() needs no arguments; DistributedSampler gives each rank its share of the data."""

import argparse
import os

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=32)  # per rank
parser.add_argument("--lr", type=float, default=0.05)
args, _ = parser.parse_known_args()

dist.init_process_group("gloo")  # "nccl" on GPUs; torch.cuda.set_device(int(os.environ["LOCAL_RANK"])) first
rank, world = dist.get_rank(), dist.get_world_size()

data = np.load(os.path.join(os.environ["SM_CHANNEL_TRAIN"], "data.npz"))
dataset = TensorDataset(torch.from_numpy(data["x"]), torch.from_numpy(data["y"]))
sampler = DistributedSampler(dataset, shuffle=True, seed=0)
loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(data["x"].shape[1], 16), nn.ReLU(), nn.Linear(16, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)  # a different shuffle every epoch, the same on every rank
    total = torch.zeros(2)
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()  # DDP averages the gradients across ranks here
        optimizer.step()
        total += torch.tensor([loss.item() * len(x), len(x)])
    dist.all_reduce(total)  # the epoch's loss over every rank's samples
    if rank == 0:
        print(f"epoch={epoch} loss={total[0] / total[1]:.4f} (world size {world})", flush=True)

if rank == 0:  # every rank holds the same weights; one copy is the model
    torch.save(model.module.state_dict(), os.path.join(os.environ["SM_MODEL_DIR"], "model.pth"))
dist.destroy_process_group()
