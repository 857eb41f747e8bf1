"""A tiny regression net for the debugger tests: --kind sigmoid (deep sigmoid: vanishing gradients),
relu (healthy), --lr for a huge learning rate, --steps; no debugger code in it."""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--kind", default="relu")
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--steps", type=int, default=30)
args = parser.parse_args()
torch.manual_seed(0)
act = nn.Sigmoid if args.kind == "sigmoid" else nn.ReLU
depth = 12 if args.kind == "sigmoid" else 2
layers = [nn.Linear(8, 16), act()]
for _ in range(depth):
    layers += [nn.Linear(16, 16), act()]
model = nn.Sequential(*layers, nn.Linear(16, 1))
loss_fn = nn.MSELoss()
opt = torch.optim.SGD(model.parameters(), lr=args.lr)
x = torch.randn(64, 8)
y = x.sum(dim=1, keepdim=True)
for step in range(args.steps):
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
