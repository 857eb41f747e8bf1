"""A single-device training script turned parallel with shipyard.parallel. The strategy is not in
this file: it comes from the job's `distribution` (smdistributed.modelparallel.parameters, which reach
the script as mp_parameters), so the same script runs as DDP, FSDP, ZeRO-1, tensor or pipeline
parallel, with or without mixed precision, accumulation or activation checkpointing.

It resumes from the newest complete checkpoint under --checkpoint-dir (the job's checkpoint_s3_uri is
restored there before it starts), and writes summary-<host>-<rank>.json to the model directory."""

import argparse
import json
import os
import socket

import torch
from torch import nn
from torch.utils.data import TensorDataset

import shipyard.parallel as sp

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--batch-size", type=int, default=16)    # per data-parallel rank, per micro-batch
parser.add_argument("--lr", type=float, default=1e-2)
parser.add_argument("--hidden", type=int, default=64)
parser.add_argument("--checkpoint-dir", default="/opt/ml/checkpoints")
parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
args, _ = parser.parse_known_args()  # SageMaker also passes --mp_parameters k=v,...

sp.init()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                      nn.Linear(args.hidden, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
loss_fn = nn.MSELoss()
model, optimizer = sp.prepare(model, optimizer, loss_fn=loss_fn)    # the job's strategy

generator = torch.Generator().manual_seed(1)
inputs = torch.randn(4096, 32, generator=generator)
targets = inputs[:, :4].sum(dim=1, keepdim=True)                  # something learnable
loader = sp.shard(TensorDataset(inputs, targets), batch_size=args.batch_size)

start = sp.load_checkpoint(args.checkpoint_dir, model, optimizer)  # 0 on a fresh start
step, epoch, loss = start, 0, None
while step < args.steps:
    loader.sampler.set_epoch(epoch)
    for x, y in loader:
        loss = sp.forward_backward(model, x, y, loss_fn)          # or loss_fn(model(x), y).backward()
        optimizer.step()                                           # every micro-batch; accumulation is handled
        optimizer.zero_grad()
        step += 1
        if loss is not None:
            print(f"step={step} loss={loss.item():.5f}", flush=True)
        if step % 4 == 0 or step == args.steps:
            sp.save_checkpoint(args.checkpoint_dir, model, optimizer, step, keep_last=2)
        if step == args.steps:
            break
    epoch += 1

os.makedirs(args.model_dir, exist_ok=True)
summary = {"rank": sp.rank(), "world_size": sp.world_size(), "resumed_from": start, "steps": step,
           "strategies": list(model.shipyard_strategies),
           "layout": {"dp": sp.layout().dp, "pp": sp.layout().pp, "tp": sp.layout().tp},
           "loss": loss.item() if loss is not None else None}
with open(os.path.join(args.model_dir, f"summary-{socket.gethostname()}-{sp.rank()}.json"), "w") as f:
    json.dump(summary, f)
