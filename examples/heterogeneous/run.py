"""A job whose preprocessing is the bottleneck, run homogeneous and heterogeneous side by side
(docs/heterogeneous-clusters.md): the same trainers, first preparing their own batches, then fed by a
`data` instance group that prepares them over the network while they train.

    .venv/bin/python examples/heterogeneous/run.py                    # the defaults below
    .venv/bin/python examples/heterogeneous/run.py --batches 40 --work 60 --step-ms 20

Both jobs run on this machine (instance type `local`): 2 trainer instances under torchrun (DDP over
gloo), and in the heterogeneous job 1 more instance, the data group. --step-ms stands in for an
accelerator's step (the trainer's CPU idles that long per step, as while a GPU computes); with GPUs, use
0 and a real model. Prints each job's training loop (the trainers' median, from their first batch to
their last step), how long the trainers waited for data, the job's wall time, and the speed-up."""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import time
from pathlib import Path

from shipyard.instance_group import InstanceGroup
from shipyard.pytorch import PyTorch
from shipyard.store import Store

SOURCE = Path(__file__).resolve().parent / "src"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(hyperparameters: dict, heterogeneous: bool) -> dict:
    """One job; its trainers' reports (the `HETERO` lines) and its wall time."""
    if heterogeneous:
        data, train = InstanceGroup("data", "local", 1), InstanceGroup("train", "local", 2)
        shape = {"instance_groups": [data, train],
                 "distribution": {"torch_distributed": {"enabled": True}, "instance_groups": [train]}}
        hyperparameters = {**hyperparameters, "port": free_port()}
    else:
        shape = {"instance_count": 2, "instance_type": "local",
                 "distribution": {"torch_distributed": {"enabled": True}}}
    estimator = PyTorch(entry_point="train.py", source_dir=str(SOURCE), hyperparameters=hyperparameters,
                        base_job_name="hetero" if heterogeneous else "homogeneous", max_run=1800, **shape)
    started = time.time()
    estimator.fit(logs="None")
    wall = time.time() - started
    job = estimator.latest_training_job
    store, reports = Store(), []
    for log in sorted((store.job_dir(job.name) / "logs").glob("algo-*.log")):
        for line in log.read_text().splitlines():
            if "HETERO {" in line:
                reports.append(json.loads(line.split("HETERO ", 1)[1]))
    trainers = [r for r in reports if "loop_s" in r]
    return {"job": job.name, "status": job.describe()["TrainingJobStatus"], "wall_s": wall,
            "loop_s": statistics.median(r["loop_s"] for r in trainers),
            "waited_s": statistics.median(r["waited_s"] for r in trainers),
            "batches": sum(r["received"] for r in trainers), "last_loss": trainers[0]["last_loss"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=60, help="batches per trainer")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--work", type=int, default=40, help="rounds of preprocessing per batch")
    parser.add_argument("--step-ms", type=float, default=30.0, help="the accelerator's step, stood in for")
    args = parser.parse_args()
    hyperparameters = {"batches": args.batches, "batch-size": args.batch_size, "features": args.features,
                       "work": args.work, "step-ms": args.step_ms, "consumers": 2}
    results = {"homogeneous": run(hyperparameters, heterogeneous=False),
               "heterogeneous": run(hyperparameters, heterogeneous=True)}
    print()
    for name, r in results.items():
        print(f"{name:13} {r['status']:9} training loop {r['loop_s']:6.2f}s, waiting for data {r['waited_s']:6.2f}s, "
              f"wall {r['wall_s']:6.2f}s, {r['batches']} batches  (job {r['job']})")
    homogeneous, heterogeneous = results["homogeneous"], results["heterogeneous"]
    print(f"speed-up of the training loop: {homogeneous['loop_s'] / heterogeneous['loop_s']:.2f}x; "
          f"of the job: {homogeneous['wall_s'] / heterogeneous['wall_s']:.2f}x")


if __name__ == "__main__":
    main()
