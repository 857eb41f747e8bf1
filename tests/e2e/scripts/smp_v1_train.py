"""A SageMaker model parallel v1 training script, written as SageMaker's "Modify a PyTorch Training
Script" page shows one (smp.init, DistributedModel, DistributedOptimizer, @smp.step with model.backward,
StepOutput.reduce_mean, smp.save on dp_rank 0), for tests/e2e/test_smp_v1.py. The partitions,
micro-batches and schedule come from the job's distribution, not from this file.

Test instruments beside the SMP code: evidence.py (tests/parallel, copied beside it) observes what the
partition left on this rank, from a post-partition hook (an SMP API); everything lands in the model
directory: evidence-<rank>.json, model.pt_<mp_rank> (partial) and full.pt (the whole model, rank 0)."""

import argparse
import json
import os

import parallel_scenarios as sc
import smdistributed.modelparallel.torch as smp
import torch
import torch.nn.functional as F
from evidence import Evidence
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--batch-size", type=int, default=16)
args, _ = parser.parse_known_args()  # SageMaker also passes --mp_parameters k=v,...


@smp.step
def train_step(model, data, target):
    output = model(data)
    loss = F.mse_loss(output, target)
    model.backward(loss)
    return output, loss


@smp.step
def test_step(model, data, target):
    return F.mse_loss(model(data), target, reduction="sum")


smp.init()
inputs = torch.randn(2048, sc.IN, generator=torch.Generator().manual_seed(1))
dataset = TensorDataset(inputs, inputs[:, :sc.OUT] * 2)  # a learnable target
sampler = DistributedSampler(dataset, num_replicas=smp.dp_size(), rank=smp.dp_rank()) if smp.dp_size() > 1 else None
train_loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)

model = sc.model()  # nn.Sequential(Linear, ReLU, Linear, ReLU, Linear)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
model = smp.DistributedModel(model)
optimizer = smp.DistributedOptimizer(optimizer)

seen = {}
model.register_post_partition_hook(lambda m, o: seen.update(evidence=Evidence(m.module, o.optimizer)))


def evaluate(batches):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for data, target in batches:
            total += test_step(model, data, target).reduce_sum().item()
    model.train()
    return total


held_out = [next(iter(train_loader))]
eval_before = evaluate(held_out)  # the first step partitions the model, evaluation or not
losses = []
for step, (data, target) in zip(range(args.steps), train_loader):
    optimizer.zero_grad()
    _, loss_mb = train_step(model, data, target)
    loss = loss_mb.reduce_mean()
    seen["evidence"].after_backward()
    optimizer.step()
    losses.append(loss.item())
    if smp.rank() == 0 and step % 10 == 0:
        print(f"step {step} loss {loss.item():.4f}")
eval_after = evaluate(held_out)

model_dir = os.environ["SM_MODEL_DIR"]
if smp.dp_rank() == 0:
    smp.save({"model_state_dict": model.local_state_dict(), "optimizer_state_dict": optimizer.local_state_dict()},
             os.path.join(model_dir, "model.pt"), partial=True)
full = model.state_dict()  # gathered from every stage: called on every rank
if smp.rank() == 0:
    smp.save(full, os.path.join(model_dir, "full.pt"), partial=False)
smp.barrier()

record = {"rank": smp.rank(), "size": smp.size(), "host": os.environ["SM_CURRENT_HOST"],
          "mpi": "OMPI_COMM_WORLD_RANK" in os.environ, "ranks": {
              "local": smp.local_rank(), "pp": smp.pp_rank(), "pp_size": smp.pp_size(), "dp": smp.dp_rank(),
              "dp_size": smp.dp_size(), "tp": smp.tp_rank(), "mp": smp.mp_rank(), "mp_size": smp.mp_size()},
          "losses": losses, "eval": [eval_before, eval_after], **seen["evidence"].report()}
with open(os.path.join(model_dir, f"evidence-{smp.rank()}.json"), "w") as f:
    json.dump(record, f)
