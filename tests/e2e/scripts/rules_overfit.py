"""Regression with a held-out set for the Overfit rule tests, no debugger code in it: --train_size (16:
the MLP memorises it; 50000: it cannot, its training and validation losses stay within a few %), --steps,
--eval_every (then model.eval() and one forward of the held-out set: an EVAL step)."""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--train_size", type=int, default=16)
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--eval_every", type=int, default=10)
args = parser.parse_args()
torch.manual_seed(0)


def data(n):
    x = torch.randn(n, 8)
    return x, x[:, :2].sum(dim=1, keepdim=True) + torch.randn(n, 1)


x, y = data(args.train_size)
x_val, y_val = data(4096)
model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
loss_fn = nn.MSELoss()
opt = torch.optim.Adam(model.parameters(), lr=0.02)
for step in range(args.steps):
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    if (step + 1) % args.eval_every == 0:
        model.eval()
        with torch.no_grad():
            val = loss_fn(model(x_val), y_val)
        model.train()
        print(f"step {step} train loss {loss.item():.4f} validation loss {val.item():.4f}", flush=True)
