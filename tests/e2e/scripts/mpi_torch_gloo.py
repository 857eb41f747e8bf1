"""A Horovod-style script: torch.distributed (gloo) started from the MPI rank variables and the
MASTER_ADDR/MASTER_PORT the launcher gives, then one DDP step and an allreduce."""

import json
import os

import torch
import torch.distributed as dist

rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
world = int(os.environ["OMPI_COMM_WORLD_SIZE"])
local_rank = int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"])
dist.init_process_group(
    "gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", rank=rank, world_size=world
)
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)

torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(100 + rank)  # different data per rank; DDP keeps the weights equal
loss = model(torch.randn(8, 4)).pow(2).mean()
loss.backward()
optimizer.step()
weights = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
with open(f"/opt/ml/model/rank-{rank}.json", "w") as f:
    json.dump({"rank": rank, "world": world, "local_rank": local_rank, "sum": value.item(), "weights": weights,
               "host": os.environ["SM_CURRENT_HOST"]}, f)
print(f"rank {rank}/{world} loss={loss.item():.4f} sum={value.item()}")
dist.destroy_process_group()
