"""The quick start's training script, written for SageMaker and run unchanged by shipyard: a linear
regression on the CSV files of the `train` channel.

It reads its hyperparameters from the command line (--epochs 3 --lr 0.1 --steps 20 --optimizer sgd), its
data from SM_CHANNEL_TRAIN, and writes model.pth to SM_MODEL_DIR, which the platform packs into
model.tar.gz. Started by torchrun (distribution torch_distributed) it trains data-parallel over every
process of every instance; started without a distribution it trains alone. It prints `epoch=N loss=X`
once per epoch, for metric definitions and tuning. A CPU job of a few seconds."""

import argparse
import glob
import os

import numpy as np
import torch
import torch.distributed as dist
from torch import nn


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per epoch")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    parser.add_argument("--train", default=os.environ.get("SM_CHANNEL_TRAIN"))
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    args, _ = parser.parse_known_args()  # SageMaker passes every hyperparameter, used here or not
    return args


def main() -> None:
    args = parse_args()
    distributed = "WORLD_SIZE" in os.environ  # set by torchrun
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)

    rows = np.concatenate([np.loadtxt(path, delimiter=",", ndmin=2)
                           for path in sorted(glob.glob(os.path.join(args.train, "*.csv")))])
    rows = torch.from_numpy(rows[rank::world]).float()  # this process's share
    x, y = rows[:, :-1], rows[:, -1:]
    print(f"{os.environ.get('SM_CURRENT_HOST')}: rank {rank} of {world}, {len(y)} rows", flush=True)

    torch.manual_seed(0)
    model = nn.Linear(x.shape[1], 1)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}[args.optimizer](model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        for _ in range(args.steps):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        if rank == 0:
            print(f"epoch={epoch} loss={loss.item():.4f}", flush=True)

    if rank == 0:
        os.makedirs(args.model_dir, exist_ok=True)
        torch.save(getattr(model, "module", model).state_dict(), os.path.join(args.model_dir, "model.pth"))
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
