"""A PyTorch script for SageMaker distributed data parallel (SMDDP) in SageMaker's documented style, using
both of its APIs: the `smddp` backend of torch.distributed (SMDDP 1.4 and later) with torch's
DistributedDataParallel, then the API before 1.4 (`smdistributed.dataparallel.torch.distributed` and its
DistributedDataParallel) on the same process group. Each rank trains on its own shard of the data and
writes what it saw to rank-<rank>.json in the model directory (tests/e2e/test_smddp_smp_v2.py)."""

import argparse
import json
import os

import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401  registers backend="smddp"
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import smdistributed.dataparallel.torch.distributed as sdp
from smdistributed.dataparallel.torch.parallel.distributed import DistributedDataParallel as SMDDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "."))
args, _ = parser.parse_known_args()


def net() -> nn.Module:
    torch.manual_seed(0)  # the same initial weights on every rank
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(2048, 16, generator=generator)
    return TensorDataset(inputs, inputs[:, :4] * 2)


def train(model: nn.Module, world: int, rank: int) -> dict:
    batch_size = max(args.batch_size // world, 1)  # SMDDP's guide: scale the batch by the world size
    sampler = DistributedSampler(dataset(), num_replicas=world, rank=rank)
    loader = DataLoader(dataset(), batch_size=batch_size, sampler=sampler)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses, first_batch = [], None
    for _, (x, y) in zip(range(args.steps), loader):
        first_batch = first_batch if first_batch is not None else x.sum().item()
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return {"losses": losses, "first_batch": first_batch,
            "params": [p.detach().flatten().tolist() for p in model.parameters()]}


# SMDDP 1.4 and later: torch.distributed with the smddp backend
dist.init_process_group(backend="smddp")
rank, world = dist.get_rank(), dist.get_world_size()
model = DDP(net())
report = {
    "rank": rank, "world": world, "host": os.environ["SM_CURRENT_HOST"],
    "backend": dist.get_backend(), "ddp_backend": dist.get_backend(model.process_group),
    # the torch backend object that carries the group's collectives on the CPU
    "served_by": type(dist.group.WORLD._get_backend(torch.device("cpu"))).__name__,
    "torch_ddp": train(model, world, rank),
}

# The API before SMDDP 1.4, on the same process group
sdp.init_process_group()
total = torch.tensor([float(sdp.get_rank() + 1)])
sdp.all_reduce(total)
mean = torch.tensor([float(sdp.get_rank() + 1)])
sdp.all_reduce(mean, op=sdp.ReduceOp.AVERAGE)
largest = torch.tensor([float(sdp.get_rank() + 1)])
sdp.all_reduce(largest, op=sdp.ReduceOp.MAX)
shared = torch.tensor([42.0 if sdp.get_rank() == 0 else 0.0])
sdp.broadcast(shared, src=0)
gathered = [torch.zeros(1) for _ in range(sdp.get_world_size())]
sdp.all_gather(gathered, torch.tensor([float(sdp.get_rank())]))
sdp.barrier()
report["legacy"] = {
    "rank": sdp.get_rank(), "world": sdp.get_world_size(), "local_rank": sdp.get_local_rank(),
    "local_size": sdp.get_local_size(), "available": sdp.is_available(), "initialized": sdp.is_initialized(),
    "sum": total.item(), "average": mean.item(), "max": largest.item(), "broadcast": shared.item(),
    "all_gather": [t.item() for t in gathered],
    "ddp": train(SMDDP(net()), sdp.get_world_size(), sdp.get_rank()),
}

with open(os.path.join(args.model_dir, f"rank-{rank}.json"), "w") as f:
    json.dump(report, f)
