"""A tiny DDP regression (gloo, CPU) for the capture tests, with no debugger code: each rank trains on
its own data (its inputs and local gradients differ, DDP keeps its weights equal), then evaluates with
model.eval() under no_grad. --steps, --eval_batches."""
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--eval_batches", type=int, default=2)
args = parser.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.relu1, self.fc2 = nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)

    def forward(self, x):
        return self.fc2(self.relu1(self.fc1(x)))


torch.manual_seed(0)
model = DistributedDataParallel(Net())
loss_fn = nn.MSELoss()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
generator = torch.Generator().manual_seed(100 + rank)  # each rank its own data
for step in range(args.steps):
    x = torch.randn(8, 4, generator=generator)
    opt.zero_grad()
    loss = loss_fn(model(x), x.sum(dim=1, keepdim=True))
    loss.backward()
    opt.step()
model.eval()
with torch.no_grad():
    for _ in range(args.eval_batches):
        x = torch.randn(8, 4, generator=generator)
        loss_fn(model(x), x.sum(dim=1, keepdim=True))
print(f"rank {rank} of {dist.get_world_size()} on {os.environ.get('SM_CURRENT_HOST')} done")
dist.destroy_process_group()
