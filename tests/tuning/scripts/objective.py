"""A trial whose objective is a known noisy function of its hyperparameters: loss falls towards
(log10(lr) + 2)^2 + ((width - 32) / 32)^2 (best at lr=0.01, width=32) as epochs pass, plus noise
drawn from the hyperparameters and the epoch. Logs `loss=` every epoch, checkpoints every epoch
(before logging it) and resumes from the checkpoint, saying at which epoch it started."""

import argparse
import json
import math
import os
import random
import time

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--width", type=int, default=32)
parser.add_argument("--optimizer", type=str, default="sgd")
parser.add_argument("--epochs", type=int, default=9)
parser.add_argument("--epoch-seconds", type=float, default=0.05)
parser.add_argument("--ddp", type=int, default=0)
parser.add_argument("--fail", type=int, default=0)
args, _ = parser.parse_known_args()
if args.fail:
    raise SystemExit("failing as asked (--fail 1)")

if args.ddp:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    ones = torch.ones(1)
    dist.all_reduce(ones)
    print(f"world={int(ones.item())} rank={dist.get_rank()}", flush=True)

checkpoint = "/opt/ml/checkpoints/state.json"
start = 0
if os.path.exists(checkpoint):
    start = json.load(open(checkpoint))["epoch"]
print(f"first_epoch={start + 1}", flush=True)

floor = (math.log10(args.lr) + 2) ** 2 + ((args.width - 32) / 32) ** 2 + (0.3 if args.optimizer == "sgd" else 0)
for epoch in range(start + 1, args.epochs + 1):
    time.sleep(args.epoch_seconds)
    noise = random.Random(f"{args.lr}/{args.width}/{args.optimizer}/{epoch}").gauss(0, 0.02)
    loss = floor + 1.0 / epoch + noise
    os.makedirs(os.path.dirname(checkpoint), exist_ok=True)
    with open(checkpoint + ".tmp", "w") as f:
        json.dump({"epoch": epoch}, f)
    os.replace(checkpoint + ".tmp", checkpoint)
    if not args.ddp or dist.get_rank() == 0:
        print(f"epoch={epoch} loss={loss:.6f}", flush=True)
open("/opt/ml/model/result.json", "w").write(json.dumps({"loss": loss, "epochs": args.epochs}))
