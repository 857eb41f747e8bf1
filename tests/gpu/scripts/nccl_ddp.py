"""DDP over NCCL as a torchrun-launched script writes it: each rank on the GPU of its LOCAL_RANK among
those its instance's CUDA_VISIBLE_DEVICES shows, one all-reduce, then a few DDP steps on data of its
own. Writes, per rank, what it saw to the model directory."""

import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

STEPS = 30

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank)
dist.init_process_group("nccl", device_id=device)
rank, world = dist.get_rank(), dist.get_world_size()

total = torch.tensor([float(rank + 1)], device=device)
dist.all_reduce(total)

torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(16, 1).to(device), device_ids=[local_rank])
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
generator = torch.Generator(device=device).manual_seed(1 + rank)  # each rank its own data
weights = torch.linspace(-1, 1, 16, device=device).unsqueeze(1)
losses = []
for _ in range(STEPS):
    x = torch.randn(64, 16, device=device, generator=generator)
    loss = torch.nn.functional.mse_loss(model(x), x @ weights)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())

host = os.environ["SM_CURRENT_HOST"]
record = {
    "host": host, "rank": rank, "world": world, "local_rank": local_rank,
    "backend": dist.get_backend(),
    "device": str(next(model.parameters()).device),
    "device_count": torch.cuda.device_count(),
    "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "num_gpus": int(os.environ["SM_NUM_GPUS"]),
    "uuid": str(torch.cuda.get_device_properties(device).uuid).lower(),
    "allreduce": total.item(),
    "losses": losses,
    "params": [p.detach().cpu().flatten().tolist() for p in model.parameters()],
}
dist.destroy_process_group()
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"{host}-rank{rank}.json"), "w") as f:
    json.dump(record, f)
