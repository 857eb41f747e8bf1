"""The Ray backend vs the local backend, side by side, on the same 2-instance DDP job.

    .venv/bin/python benchmarks/ray_backend.py [--repeat 2] [--steps 300]

Starts a simulated Ray cluster on this machine (`ray.cluster_utils.Cluster`: a head node with no CPUs
and two one-CPU worker nodes, all on 127.0.0.1), then runs the same job (2 instances x 1 process,
torch_distributed, gloo, DDP over a Linear(256, 256), `--steps` steps) through the SDK with
backend="local" and backend="ray", alternating, after one unmeasured warm-up of each.

  submit to first step   from just before the estimator is built to rank 0's first finished step
                         (its printed timestamp, read from the host log copied to the controller)
  per step               rank 0's mean step time over the steps after the first

The nodes are this machine, so file:// paths are shared storage here (SHIPYARD_RAY_SHARED_STORAGE=1).
SHIPYARD_HOME and the node directories are a temporary directory, removed at the end."""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from run import SCRIPT  # noqa: E402  (the same DDP script as run.py's, with a larger model)

STEP = re.compile(r"BENCH_STEP (\d+) ts=([0-9.]+)")
MODEL = {"inputs": 256, "outputs": 256, "batch": 32}   # the script's arguments: Linear(256, 256), batch 32


def run_job(backend: str, source: Path, steps: int) -> dict[str, float]:
    from shipyard.pytorch import PyTorch

    submitted = time.time()
    est = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=2, instance_type="local",
                  distribution={"torch_distributed": {"enabled": True}}, hyperparameters={"steps": steps, **MODEL},
                  backend=backend, max_run=600, stop_grace_seconds=5, hang_timeout_seconds=0)
    est.fit(wait=True, logs="None")
    job = est.latest_training_job
    log = Path(os.environ["SHIPYARD_HOME"]) / "jobs" / job.name / "logs" / "algo-1.log"
    stamps = {int(m[1]): float(m[2]) for m in STEP.finditer(log.read_text())}
    return {"first_step_s": stamps[1] - submitted, "step_ms": (stamps[steps] - stamps[1]) / (steps - 1) * 1000}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    from ray.cluster_utils import Cluster

    with tempfile.TemporaryDirectory(prefix="shipyard-bench-ray-") as tmp:
        os.environ.update(SHIPYARD_HOME=f"{tmp}/home", SHIPYARD_RAY_NODE_DIR=f"{tmp}/nodes",
                          SHIPYARD_RAY_SHARED_STORAGE="1", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "node_ip_address": "127.0.0.1", "include_dashboard": False})
        for _ in range(2):
            cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
        os.environ["RAY_ADDRESS"] = cluster.address
        source = Path(tmp) / "src"
        source.mkdir()
        (source / "train.py").write_text(SCRIPT)
        try:
            for backend in ("local", "ray"):
                run_job(backend, source, 10)   # warm-up: page cache, lazy imports, Ray worker pool
            results: dict[str, list[dict[str, float]]] = {"local": [], "ray": []}
            for i in range(args.repeat):
                for backend in (("local", "ray") if i % 2 == 0 else ("ray", "local")):
                    results[backend].append(run_job(backend, source, args.steps))
                    print(backend, results[backend][-1], flush=True)
        finally:
            cluster.shutdown()
    print(f"\n2 instances x 1 process, {args.steps} steps, {args.repeat} repetitions (medians)")
    print(f"{'':24}{'local':>10}{'ray':>10}{'ray/local':>11}")
    for key, label, unit in (("first_step_s", "submit to first step", "s"), ("step_ms", "per step", "ms")):
        local = statistics.median(r[key] for r in results["local"])
        ray = statistics.median(r[key] for r in results["ray"])
        print(f"{label:24}{local:>9.2f}{unit[0]}{ray:>9.2f}{unit[0]}{ray / local:>10.2f}x"
              if unit == "s" else f"{label:24}{local:>8.2f}{unit}{ray:>8.2f}{unit}{ray / local:>10.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
