"""A Horovod-style script under `mpi`: mpirun starts every rank, so the rank and world size come from
MPI (mpi4py, or the OMPI_COMM_WORLD_* variables), and torch.distributed (gloo) is initialised from
them and the MASTER_ADDR/MASTER_PORT shipyard gives every instance. Each rank trains on its own slice
of the data; DDP averages the gradients; mpi4py reduces the epoch's loss, as a Horovod script would
with hvd.allreduce."""

import argparse
import os

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=32)  # per rank
parser.add_argument("--lr", type=float, default=0.05)
args, _ = parser.parse_known_args()

comm = MPI.COMM_WORLD  # comm.rank == OMPI_COMM_WORLD_RANK, comm.size == OMPI_COMM_WORLD_SIZE
local_rank = int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"])  # the GPU to use on a GPU instance
dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                        rank=comm.rank, world_size=comm.size)

data = np.load(os.path.join(os.environ["SM_CHANNEL_TRAIN"], "data.npz"))
x_all, y_all = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
x_mine, y_mine = x_all[comm.rank::comm.size], y_all[comm.rank::comm.size]  # this rank's share

torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(x_all.shape[1], 16), nn.ReLU(), nn.Linear(16, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
generator = torch.Generator().manual_seed(comm.rank)
for epoch in range(args.epochs):
    order = torch.randperm(len(x_mine), generator=generator)
    loss_sum = 0.0
    for start in range(0, len(order), args.batch_size):
        batch = order[start:start + args.batch_size]
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x_mine[batch]), y_mine[batch])
        loss.backward()
        optimizer.step()
        loss_sum += loss.item() * len(batch)
    loss_sum = comm.allreduce(loss_sum, op=MPI.SUM)  # every rank's samples
    if comm.rank == 0:
        print(f"epoch={epoch} loss={loss_sum / len(x_all):.4f} (rank {comm.rank} of {comm.size} "
              f"on {os.environ['SM_CURRENT_HOST']}, local rank {local_rank})", flush=True)

if comm.rank == 0:
    torch.save(model.module.state_dict(), os.path.join(os.environ["SM_MODEL_DIR"], "model.pth"))
dist.destroy_process_group()
