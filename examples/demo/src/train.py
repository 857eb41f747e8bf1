"""A plain SageMaker PyTorch training script: a small MLP classifier trained with DDP.

Started by torchrun on every instance (torch_distributed), it reads its hyperparameters from the
command line, its data from SM_CHANNEL_TRAIN / SM_CHANNEL_TEST and writes the model to SM_MODEL_DIR,
exactly as it would on SageMaker.

With the train channel distributed ShardedByS3Key every instance receives different files, so each
instance's processes split only that instance's data (DistributedSampler over the local ranks); with
FullyReplicated data every process takes its share of the whole set (over all ranks)."""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from data import CLASSES, FEATURES, read_shards


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", default=os.environ.get("SM_CHANNEL_TRAIN"))
    parser.add_argument("--test", default=os.environ.get("SM_CHANNEL_TEST"))
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    args, _ = parser.parse_known_args()  # SageMaker may pass hyperparameters this script does not use
    return args


class MLP(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(FEATURES, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, CLASSES),
        )

    def forward(self, x):
        return self.net(x)


def channel_is_sharded(name: str) -> bool:
    config = json.loads(os.environ.get("SM_INPUT_DATA_CONFIG") or "{}")
    return config.get(name, {}).get("S3DistributionType") == "ShardedByS3Key"


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo")  # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    local_world = int(os.environ["LOCAL_WORLD_SIZE"])
    host = os.environ.get("SM_CURRENT_HOST", "local")
    torch.manual_seed(args.seed)

    x, y, files = read_shards(args.train)
    sharded = channel_is_sharded("train")
    if local_rank == 0:
        print(f"{host}: {len(files)} train files, {len(y)} rows "
              f"({'ShardedByS3Key' if sharded else 'FullyReplicated'})", flush=True)
    if rank == 0:
        print(f"world size {world}: {world // local_world} instances x {local_world} processes; "
              f"epochs={args.epochs} lr={args.lr} batch_size={args.batch_size}", flush=True)

    train = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    replicas, replica = (local_world, local_rank) if sharded else (world, rank)
    sampler = DistributedSampler(train, num_replicas=replicas, rank=replica, shuffle=True, seed=args.seed)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    # Every rank must run the same number of steps, or DDP's allreduce waits forever: with sharded
    # data the instances may hold different amounts, so all agree on the smallest count.
    steps = torch.tensor([len(loader)])
    dist.all_reduce(steps, op=dist.ReduceOp.MIN)
    steps = int(steps)

    test_loader = None
    if args.test:
        tx, ty, _ = read_shards(args.test)
        test = TensorDataset(torch.from_numpy(tx), torch.from_numpy(ty))
        test_loader = DataLoader(test, batch_size=512,
                                 sampler=DistributedSampler(test, num_replicas=world, rank=rank, shuffle=False))

    model = DDP(MLP(args.hidden))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(1, args.epochs + 1):
        started = time.time()
        model.train()
        sampler.set_epoch(epoch)
        totals = torch.zeros(3)  # loss sum, correct, examples (training)
        for step, (xb, yb) in enumerate(loader):
            if step == steps:
                break
            optimizer.zero_grad()
            out = model(xb)
            loss = loss_fn(out, yb)
            loss.backward()
            optimizer.step()
            totals += torch.tensor([loss.item() * len(yb), (out.argmax(1) == yb).sum().item(), len(yb)])
        if test_loader is not None:  # accuracy on held-out data, each rank scoring its part
            model.eval()
            scores = torch.zeros(2)
            with torch.no_grad():
                for xb, yb in test_loader:
                    scores += torch.tensor([(model(xb).argmax(1) == yb).sum().item(), len(yb)])
            dist.all_reduce(scores)
            accuracy = scores[0] / scores[1]
        dist.all_reduce(totals)
        if test_loader is None:
            accuracy = totals[1] / totals[2]
        if rank == 0:
            print(f"epoch={epoch} loss={totals[0] / totals[2]:.4f} accuracy={accuracy:.4f} "
                  f"train_acc={totals[1] / totals[2]:.4f} ({time.time() - started:.2f}s)", flush=True)

    if rank == 0:
        os.makedirs(args.model_dir, exist_ok=True)
        path = os.path.join(args.model_dir, "model.pth")
        torch.save(model.module.state_dict(), path)
        with open(os.path.join(args.model_dir, "model-config.json"), "w") as f:
            json.dump({"features": FEATURES, "classes": CLASSES, "hidden": args.hidden}, f)
        print(f"saved the model to {path}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
