"""shipyard's Ray backend vs Ray Train's TorchTrainer, side by side, on the same DDP job across hosts.

    .venv/bin/python benchmarks/ray_hosts.py [--repeat 2] [--steps 200] [--hosts 2 4] [--json out.json]

For each number of hosts N (2 and 4) the benchmark builds N+1 hosts on this machine (tests/e2e/netns.py:
network namespaces on a private bridge, each with its own address, ports, /tmp and processes, and a Ray
node started with `ray start`): a head with no CPUs, where both sides are submitted from, and N one-CPU
workers. Then the same job (N ranks, one per worker host, gloo, DDP over a Linear(256, 256), batch 32,
`--steps` steps: benchmarks/run.py's script) runs two ways, alternating, after one unmeasured warm-up of
each:

  shipyard     `shipyard run train.py --backend ray --instance-count N --distribution torch_distributed`
               on the head (waits for the job; the output path is s3:// on moto's server on the bridge,
               since on Ray it must be storage every node reaches), with OMP_NUM_THREADS=1, the threads Ray
               gives each one-CPU Ray Train worker
  ray_train    `python ray_hosts.py ray-train ...` on the head: a driver whose TorchTrainer runs the same
               script with ScalingConfig(num_workers=N, resources_per_worker={"CPU": 1}); Ray Train has
               made the gloo process group before the script runs, so the script's init_process_group is
               skipped. Its storage_path is a directory outside /tmp, which every host sees at the same
               path (only /tmp is a host's own): a shared filesystem, as Ray Train asks for on several nodes.

Measured from just before the command is started on the head (so both include starting Python there):
  first step   until rank 0's first finished step (its printed timestamp: shipyard's from the algo-1 log
               the controller copied to the head, Ray Train's from a file on the shared directory)
  steps/s      rank 0's steps after the first, over the time they took
  wall         until the command returns (shipyard: the job's artifacts uploaded and the job Completed)

All hosts share this machine's clock. Needs root (namespaces, a bridge). Every cluster is torn down before
the next is built, and the temporary directory is removed at the end."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from run import SCRIPT  # noqa: E402  (the DDP script of run.py and ray_backend.py)

STEP = re.compile(r"BENCH_STEP (\d+) ts=([0-9.]+)")
MODEL = {"inputs": 256, "outputs": 256, "batch": 32}   # as ray_backend.py: Linear(256, 256), batch 32
HEAD = 0
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
SIDES = ("shipyard", "ray_train")
WARM_UP_STEPS = 10


# -- Ray Train's side: this file run as the driver, on the head host ---------------------------------------

def train_loop_per_worker(config: dict) -> None:
    """run.py's script in a Ray Train worker, its output in a file of its rank on the shared directory."""
    import ray.train
    import torch.distributed as dist

    # Ray Train made the gloo group already; the script's own call would fail on a second group.
    assert dist.is_initialized() and dist.get_backend() == "gloo"
    dist.init_process_group = lambda *args, **kwargs: None
    sys.argv = ["train.py", *config["argv"]]
    rank = ray.train.get_context().get_world_rank()
    with open(f"{config['out']}/rank{rank}.log", "w") as out, contextlib.redirect_stdout(out):
        exec(compile(config["script"], "train.py", "exec"), {"__name__": "__main__"})


def ray_train_driver(args: argparse.Namespace) -> int:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    Path(args.out).mkdir(parents=True)
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"script": SCRIPT, "argv": script_args(args.steps), "out": args.out},
        scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=False, resources_per_worker={"CPU": 1}),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(name=Path(args.out).name, storage_path=args.storage))
    trainer.fit()
    return 0


# -- the benchmark: clusters of netns hosts, both sides submitted on each one's head ------------------------

def script_args(steps: int) -> list[str]:
    return [f"--{key}={value}" for key, value in {"steps": steps, **MODEL}.items()]


def figures(log: str, steps: int, submitted: float, ended: float) -> dict[str, float]:
    stamps = {int(m[1]): float(m[2]) for m in STEP.finditer(log)}
    return {"first_step_s": stamps[1] - submitted, "steps_per_s": (steps - 1) / (stamps[steps] - stamps[1]),
            "wall_s": ended - submitted}


def run_on_head(cluster, argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run argv on the head host to its end: (submitted, ended), this machine's clock (every host's)."""
    submitted = time.time()
    done = cluster.run(HEAD, argv, env, timeout=900)
    ended = time.time()
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return submitted, ended


def run_shipyard(cluster, endpoint: str, hosts: int, steps: int, name: str) -> dict[str, float]:
    env = {"RAY_ADDRESS": cluster.ray_address, "SHIPYARD_HOME": "/tmp/shipyard-home",
           "SHIPYARD_S3_ENDPOINT_URL": endpoint, **AWS}
    hyperparameters = [arg for key, value in {"steps": steps, **MODEL}.items() for arg in ("--hp", f"{key}={value}")]
    submitted, ended = run_on_head(cluster, [
        "shipyard", "run", "train.py", "--source-dir", "/tmp/src", "--instance-count", str(hosts),
        "--distribution", "torch_distributed", "--backend", "ray", "--output-path", "s3://out/jobs",
        "--job-name", name, "--max-run", "600", "--stop-grace-seconds", "5", "--no-logs", *hyperparameters,
        # Ray starts each Ray Train worker with OMP_NUM_THREADS set to its CPUs (1); shipyard leaves an
        # instance's threads to torch, which takes every core the host has (here this machine's 2, shared by
        # all hosts). The same job gets the same threads on both sides, so steps/s compares the platforms.
        "--env", "OMP_NUM_THREADS=1"], env)
    log = cluster.on_host(HEAD, f"/tmp/shipyard-home/jobs/{name}/logs/algo-1.log").read_text()
    return figures(log, steps, submitted, ended)


def run_ray_train(cluster, shared: Path, hosts: int, steps: int, name: str) -> dict[str, float]:
    out = shared / name
    submitted, ended = run_on_head(cluster, [
        "python", str(Path(__file__).resolve()), "ray-train", "--workers", str(hosts), "--steps", str(steps),
        "--out", str(out), "--storage", str(shared / "ray-results")], {"RAY_ADDRESS": cluster.ray_address})
    return figures((out / "rank0.log").read_text(), steps, submitted, ended)


def measure(hosts: int, args: argparse.Namespace, base: Path) -> dict[str, list[dict[str, float]]]:
    """One cluster of 1 + `hosts` hosts: a warm-up of each side, then --repeat runs of each, alternating."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)   # moto's server: no line per request

    from tests.e2e.netns import NetnsCluster

    started = time.monotonic()
    shared = base / f"shared{hosts}"   # outside /tmp: the same directory on every host
    shared.mkdir()
    with NetnsCluster(base / f"cluster{hosts}", size=1 + hosts, head_cpus=0, worker_cpus=1) as cluster:
        print(f"[{hosts} hosts] cluster up in {time.monotonic() - started:.1f} s", flush=True)
        server = ThreadedMotoServer(ip_address=cluster.bridge_address, port=0, verbose=False)
        server.start()
        try:
            endpoint = "http://{}:{}".format(*server.get_host_and_port())
            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                         aws_secret_access_key="testing").create_bucket(Bucket="out")
            source = cluster.on_host(HEAD, "/tmp/src")   # the submitting host's own files
            source.mkdir()
            (source / "train.py").write_text(SCRIPT)
            sides = {"shipyard": lambda steps, name: run_shipyard(cluster, endpoint, hosts, steps, name),
                     "ray_train": lambda steps, name: run_ray_train(cluster, shared, hosts, steps, name)}
            for side in SIDES:   # warm-up: page cache, lazy imports, the nodes' Ray worker pools
                sides[side](WARM_UP_STEPS, f"warm-up-{side.replace('_', '-')}")
            results: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
            for i in range(args.repeat):
                for side in (SIDES if i % 2 == 0 else SIDES[::-1]):
                    results[side].append(sides[side](args.steps, f"bench-{side.replace('_', '-')}-{i}"))
                    print(f"[{hosts} hosts] {side} {results[side][-1]}", flush=True)
        finally:
            server.stop()
    return results


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def table(results: dict[int, dict[str, list[dict[str, float]]]], args: argparse.Namespace) -> str:
    lines = [f"{args.steps} steps, {args.repeat} repetitions (medians); N hosts = N ranks, one per worker host",
             f"{'':8}{'':16}{'shipyard':>10}{'ray_train':>11}{'shipyard/ray_train':>20}"]
    for hosts, runs in results.items():
        ours, theirs = medians(runs["shipyard"]), medians(runs["ray_train"])
        for key, label, unit in (("first_step_s", "first step", "s"), ("steps_per_s", "steps/s", ""),
                                 ("wall_s", "wall", "s")):
            lines.append(f"{f'{hosts} hosts':8}{label:16}{ours[key]:>9.2f}{unit:1}{theirs[key]:>10.2f}{unit:1}"
                         f"{ours[key] / theirs[key]:>19.2f}x")
    return "\n".join(lines)


def main() -> int:
    if sys.argv[1:2] == ["ray-train"]:
        driver = argparse.ArgumentParser(prog="ray_hosts.py ray-train", description="Ray Train's side (internal)")
        driver.add_argument("--workers", type=int, required=True)
        driver.add_argument("--steps", type=int, required=True)
        driver.add_argument("--out", required=True)
        driver.add_argument("--storage", required=True)
        return ray_train_driver(driver.parse_args(sys.argv[2:]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--hosts", type=int, nargs="+", default=[2, 4], help="worker hosts of each cluster")
    parser.add_argument("--json", type=Path, help="write every run's figures and the medians here")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from tests.e2e.netns import problem

    if (why := problem()) is not None:
        print(f"ray_hosts.py cannot build its hosts: {why}", file=sys.stderr)
        return 2
    results, loads = {}, {}
    started = time.monotonic()
    # Not under /tmp: the shared directories in it are seen at the same path by every host.
    with tempfile.TemporaryDirectory(prefix="shipyard-bench-ray-hosts-", dir="/var/tmp") as base:
        for hosts in args.hosts:
            before = os.getloadavg()[0]   # the machine may be shared: say how busy it was
            results[hosts] = measure(hosts, args, Path(base))
            loads[hosts] = (before, os.getloadavg()[0])
    print("\n" + table(results, args))
    print(f"whole run {time.monotonic() - started:.0f} s; load average (1 min) before / after each cluster: "
          + ", ".join(f"{hosts} hosts {a:.1f} / {b:.1f}" for hosts, (a, b) in loads.items()))
    if args.json:
        args.json.write_text(json.dumps({
            "args": {"repeat": args.repeat, "steps": args.steps, "hosts": args.hosts},
            "machine": {"cpus": len(os.sched_getaffinity(0)), "machine": platform.machine(),
                        "python": platform.python_version(), "torch": version("torch"), "ray": version("ray")},
            "load_average_before_after": loads, "runs": results,
            "medians": {hosts: {side: medians(runs[side]) for side in SIDES} for hosts, runs in results.items()}},
            indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
