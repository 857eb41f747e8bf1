"""The planner against reality on this machine: calibrate a DDP job (a few steps on 1 and 2 local
instances, through the profiler: `shipyard.plan(..., calibrate=True)`), predict its wall time on 1, 2 and
4 local instances, run it on each, and report the error (the goal: within 20 %).

    .venv/bin/python benchmarks/planner.py [--steps 1200] [--json out.json]

The job: an MLP of 4 x Linear(1024, 1024) trained with DDP (gloo) for `--steps` optimizer steps of a
batch of 64 on one instance; with n instances each rank takes every n-th batch (data parallel at a fixed
batch per rank), so the whole training is the same on every count. Wall time is from submission to
fit() returning. The instances are `local` ones: they share this machine's cores, which the calibrated
model counts (planner/models.py `contention`). The job sets OMP_NUM_THREADS=1 (`--threads`), as torchrun
does for several processes on one machine: with torch's default (every core in every process, `--threads
0`) instances sharing few cores spin-wait on each other and no linear model predicts them.
SHIPYARD_HOME is a temporary directory."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = '''\
import argparse, os
import torch, torch.distributed as dist
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1200)
args, _ = parser.parse_known_args()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(1024, 1024), nn.ReLU())]))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for batch in range(rank, args.steps, world):   # this rank's share of the batches
    data = torch.randn(64, 1024, generator=torch.Generator().manual_seed(batch))
    loss = model(data).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(f"rank {rank} trained {len(range(rank, args.steps, world))} steps", flush=True)
dist.destroy_process_group()
'''


def estimator(source: Path, count: int, steps: int, threads: int | None):
    from shipyard.pytorch import PyTorch

    return PyTorch(entry_point="train.py", source_dir=str(source), instance_type="local", instance_count=count,
                   distribution={"torch_distributed": {"enabled": True}}, hyperparameters={"steps": steps},
                   environment={"OMP_NUM_THREADS": str(threads)} if threads else {}, max_run=3600,
                   hang_timeout_seconds=0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--counts", default="1,2,4")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS for the job, as torchrun sets it "
                        "for several processes on one machine (0: torch's default, every core in every process)")
    parser.add_argument("--json", help="Write the results here too.")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    with tempfile.TemporaryDirectory(prefix="shipyard-bench-planner-") as tmp:
        os.environ["SHIPYARD_HOME"] = str(Path(tmp) / "home")
        os.environ.setdefault("SHIPYARD_LOCAL_MAX_INSTANCES", str(max(counts)))
        source = Path(tmp) / "src"
        source.mkdir()
        (source / "train.py").write_text(SCRIPT)

        import warnings

        import shipyard

        warnings.simplefilter("ignore")   # the framework_version note
        started = time.monotonic()
        plan = shipyard.plan(deadline="1h", estimator=estimator(source, 1, args.steps, args.threads), calibrate=True,
                             steps=args.steps, interruptions_ok=False, max_instances=max(counts))
        calibration_seconds = time.monotonic() - started
        predicted = {o.instance_count: o.hours * 3600 for o in plan.options if o.instance_type == "local"}
        rows = []
        for count in counts:
            est = estimator(source, count, args.steps, args.threads)
            began = time.monotonic()
            est.fit(logs="None")
            actual = time.monotonic() - began
            rows.append({"instances": count, "predicted_s": round(predicted[count], 2), "actual_s": round(actual, 2),
                         "error": round(predicted[count] / actual - 1, 4)})
    result = {"command": " ".join(["benchmarks/planner.py", *sys.argv[1:]]), "machine": platform.machine(),
              "cores": os.cpu_count(), "threads": args.threads, "steps": args.steps, "calibration_s": round(calibration_seconds, 1),
              "rows": rows}
    print(f"calibration (1 and 2 instances, a few steps each): {calibration_seconds:.1f} s")
    print(f"{'instances':>9}  {'predicted s':>11}  {'actual s':>8}  {'error':>7}")
    for row in rows:
        print(f"{row['instances']:>9}  {row['predicted_s']:>11.1f}  {row['actual_s']:>8.1f}  {row['error']:>+7.1%}")
    print(f"goal: within 20 %; worst {max(abs(r['error']) for r in rows):.1%}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
