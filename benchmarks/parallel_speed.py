"""Training speed (steps/second) of DDP through shipyard.parallel: launched as a shipyard job vs by
plain torchrun, and shipyard.parallel's DDP vs hand-written DDP, on the same script, side by side.

    .venv/bin/python benchmarks/parallel_speed.py [--repeat 3] [--steps 200] [--json out.json]

Three variants of one script (2 instances x 2 processes, gloo, an MLP of 4 x Linear(512, 512), batch
32 per rank, Adam), launched by benchmarks/run.py's own helpers:
  shipyard+sp    a shipyard job (SDK, local backend, torch_distributed); the script uses sp.prepare()
  torchrun+sp    the same script under two plain torchrun processes
  torchrun+ddp   the script with DistributedDataParallel written by hand (BENCH_MODE=plain)
Each rank times `steps` steps after 20 untimed ones and prints its steps/second; the variants alternate
order between repetitions. Ratios: shipyard+sp / torchrun+sp (the launcher and sandbox), and
torchrun+sp / torchrun+ddp (the library)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from run import run_shipyard, run_torchrun, workspace  # noqa: E402

SCRIPT = '''\
import time; print(f"BENCH_START ts={time.time():.6f}", flush=True)
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
args, _ = parser.parse_known_args()
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(*(layer for _ in range(4) for layer in (nn.Linear(512, 512), nn.ReLU())))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
if os.environ.get("BENCH_MODE") == "plain":
    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(model)
else:
    import shipyard.parallel as sp
    sp.init()
    model, optimizer = sp.prepare(model, optimizer)
rank = dist.get_rank()
x, y = torch.randn(32, 512), torch.randn(32, 512)

def step():
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()

for _ in range(20):
    step()
dist.barrier()
t0 = time.perf_counter()
for _ in range(args.steps):
    step()
dist.barrier()
print(f"BENCH_RATE rank={rank} steps_per_s={args.steps / (time.perf_counter() - t0):.3f}", flush=True)
total = torch.ones(1)
dist.all_reduce(total)
print(f"BENCH_END rank={rank} world={int(total)} ts={time.time():.6f}", flush=True)
dist.destroy_process_group()
'''
RATE = re.compile(r"BENCH_RATE rank=\d+ steps_per_s=([0-9.]+)")


def rate(text: str) -> float:
    rates = [float(r) for r in RATE.findall(text)]
    if len(rates) != 4:
        raise RuntimeError(f"expected 4 ranks' rates:\n{text[-3000:]}")
    return min(rates)  # DDP keeps ranks in step; the slowest is the job's rate


def shipyard_sp(source: Path, steps: int, workdir: Path) -> float:
    from shipyard.store import Store

    job = run_shipyard(source, steps)["job"]
    return rate("".join(Store().log_path(job, host).read_text() for host in ("algo-1", "algo-2")))


def torchrun(source: Path, steps: int, workdir: Path, mode: str) -> float:
    os.environ["BENCH_MODE"] = mode  # run_torchrun's processes inherit it
    try:
        run_torchrun(source, steps, workdir)
    finally:
        os.environ.pop("BENCH_MODE")
    return rate("".join(p.read_text() for p in sorted(workdir.glob("torchrun-node*.log"))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    workdir, source = workspace("shipyard-speed-", SCRIPT)
    variants = {
        "shipyard+sp": lambda: shipyard_sp(source, args.steps, workdir),
        "torchrun+sp": lambda: torchrun(source, args.steps, workdir, "sp"),
        "torchrun+ddp": lambda: torchrun(source, args.steps, workdir, "plain"),
    }
    rates: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for i in range(args.repeat):
            names = list(variants) if i % 2 == 0 else list(reversed(variants))
            for name in names:
                rates[name].append(variants[name]())
                print(f"run {i + 1}/{args.repeat} {name:13} {rates[name][-1]:8.1f} steps/s "
                      f"(load {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    median = {name: statistics.median(values) for name, values in rates.items()}
    print(f"\nmedian of {args.repeat}, steps/second (slowest rank), 2 instances x 2 processes")
    for name, value in median.items():
        print(f"  {name:13} {value:8.1f}")
    print(f"  shipyard+sp / torchrun+sp  = {median['shipyard+sp'] / median['torchrun+sp']:.3f}")
    print(f"  torchrun+sp / torchrun+ddp = {median['torchrun+sp'] / median['torchrun+ddp']:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"command": " ".join(sys.argv), "rates": rates, "median": median}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
