"""A shipyard.parallel training script for tests/e2e/test_parallel_jobs.py. The strategy is not in this
file: it comes from the job's `distribution`. It trains the equivalence tests' model
(tests/parallel/parallel_scenarios.py) on a learnable target and writes evidence-<rank>.json to the model
directory: what the launcher gave this process, the losses, and what the strategies did
(tests/parallel/evidence.py; both files are copied beside it)."""

import argparse
import json
import os

import parallel_scenarios as sc
import torch
from evidence import Evidence
from torch.utils.data import TensorDataset

import shipyard.parallel as sp

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
args, _ = parser.parse_known_args()  # SageMaker also passes --mp_parameters k=v,...

sp.init()
net = sc.model()
model, optimizer = sp.prepare(net, torch.optim.Adam(net.parameters(), lr=1e-2), loss_fn=sc.loss_fn)
seen = Evidence(model, optimizer)
generator = torch.Generator().manual_seed(1)
inputs = torch.randn(4096, sc.IN, generator=generator)
loader = sp.shard(TensorDataset(inputs, inputs[:, :sc.OUT] * 2), batch_size=sc.PER_RANK)  # learnable

losses = []
for _, (x, y) in zip(range(args.steps), loader):
    loss = sp.forward_backward(model, x, y, sc.loss_fn)
    seen.after_backward()
    optimizer.step()
    optimizer.zero_grad()
    if loss is not None:  # a pipeline's loss is on its last stage
        losses.append(loss.item())

evidence = {"rank": sp.rank(), "world_size": sp.world_size(), "host": os.environ["SM_CURRENT_HOST"],
            "torchrun": "TORCHELASTIC_RUN_ID" in os.environ, "losses": losses, **seen.report()}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"evidence-{sp.rank()}.json"), "w") as f:
    json.dump(evidence, f)
