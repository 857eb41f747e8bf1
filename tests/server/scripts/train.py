"""A data-parallel job for the server's tests: each step all-reduces gradients over gloo and prints
`step N loss=X` (the job's metric), sleeping --sleep s a step; --hostile prints lines that would run as
code if a page put them into its HTML; --exit-code ends it with that code."""
import argparse
import sys
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--sleep", type=float, default=0.1)
parser.add_argument("--hostile", type=int, default=0)
parser.add_argument("--exit-code", type=int, default=0)
args, _ = parser.parse_known_args()   # hyperparameters it does not use too

distributed = "RANK" in __import__("os").environ
if distributed:
    dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank() if distributed else 0)
model = torch.nn.Linear(4, 1)
if distributed:
    model = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(64, 4)
y = x.sum(dim=1, keepdim=True)
for step in range(args.steps):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    print(f"step {step} loss={loss.item():.5f}", flush=True)
    time.sleep(args.sleep)
if args.hostile:
    print("<script>document.title='pwned'</script>", flush=True)
    print("<img src=x onerror=\"document.title='pwned'\">", flush=True)
if distributed:
    dist.destroy_process_group()
sys.exit(args.exit_code)
