"""A SageMaker model parallel v2 (SMP v2) script in SageMaker's documented style: the smddp backend,
torch.sagemaker's init() and transform(), then torch's FSDP. The parallelism is the job's
(`tensor_parallel_degree` in mp_parameters). It trains the equivalence tests' model
(tests/parallel/parallel_scenarios.py, copied beside it) and writes rank-<rank>.json to the model
directory: tsm.state, FSDP's arrangement, the slices this rank holds and, on rank 0, the whole trained
parameters (tests/e2e/test_smddp_smp_v2.py)."""

import argparse
import json
import os

import parallel_scenarios as sc
import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401
import torch
import torch.distributed as dist
import torch.sagemaker as tsm
from evidence import plain_name
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
args, _ = parser.parse_known_args()  # SageMaker also passes --mp_parameters k=v,...

dist.init_process_group(backend="smddp")
tsm.init()
model = tsm.transform(sc.model())
device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
model = FSDP(model, device_id=device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

# Ranks of one tensor-parallel group read the same batches.
dp_rank, dp_size = tsm.state.rank // tsm.state.tp_size, tsm.state.world_size // tsm.state.tp_size
generator = torch.Generator().manual_seed(1)
inputs = torch.randn(4096, sc.IN, generator=generator)
data = TensorDataset(inputs, inputs[:, :sc.OUT] * 2)
loader = DataLoader(data, batch_size=sc.PER_RANK, sampler=DistributedSampler(data, num_replicas=dp_size, rank=dp_rank))

losses = []
for _, (x, y) in zip(range(args.steps), loader):
    loss = sc.loss_fn(model(x.to(device)), y.to(device))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())

rank = tsm.state.rank
report = {
    "rank": rank, "host": os.environ["SM_CURRENT_HOST"], "backend": dist.get_backend(), "losses": losses,
    "state": {name: getattr(tsm.state, name) for name in ("rank", "world_size", "tp_size", "tp_rank",
                                                           "tensor_parallel_degree", "hybrid_shard_degree")},
    "tp_group": dist.get_process_group_ranks(tsm.state.tp_process_group),
    "fsdp": {"strategy": model.sharding_strategy.name, "ranks": dist.get_process_group_ranks(model.process_group),
             "numel": sum(p.numel() for p in model.parameters())},
}
with FSDP.summon_full_params(model):  # the module's own parameters: this rank's tensor-parallel slices
    report["params"] = {plain_name(n): {"local": list(p.to_local().shape if isinstance(p, DTensor) else p.shape),
                                        "mesh": dict(zip(p.device_mesh.mesh_dim_names, p.device_mesh.shape))
                                        if isinstance(p, DTensor) else None}
                        for n, p in model.named_parameters()}
    whole = {plain_name(n): (p.full_tensor() if isinstance(p, DTensor) else p).tolist()
             for n, p in model.named_parameters()}
if rank == 0:
    report["whole"] = whole
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank-{rank}.json"), "w") as f:
    json.dump(report, f)
