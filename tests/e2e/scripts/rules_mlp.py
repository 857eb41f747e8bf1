"""A small regression MLP for the debugger rule tests, no debugger code in it: --lr (huge: exploding
loss), --dead (fc1's bias far below zero: fc1_relu never fires), --plateau_after N (the learning rate
drops to 0 at step N, so the loss stops decreasing), --sleep seconds per step (for a job a rule stops).
Its ReLUs are named fc1_relu/fc2_relu so their outputs match DeadRelu's `.*relu_output`."""
import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--dead", type=int, default=0)
parser.add_argument("--plateau_after", type=int, default=-1)
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc1_relu = nn.Linear(8, 32), nn.ReLU()
        self.fc2, self.fc2_relu = nn.Linear(32, 32), nn.ReLU()
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        return self.out(self.fc2_relu(self.fc2(self.fc1_relu(self.fc1(x)))))


model = Net()
if args.dead:
    with torch.no_grad():
        model.fc1.bias.fill_(-100.0)
loss_fn = nn.MSELoss()
opt = torch.optim.SGD(model.parameters(), lr=args.lr)
x = torch.randn(64, 8)
y = x.sum(dim=1, keepdim=True)
for step in range(args.steps):
    if step == args.plateau_after:
        for group in opt.param_groups:
            group["lr"] = 0.0
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.6g}", flush=True)
    time.sleep(args.sleep)
