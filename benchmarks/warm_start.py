"""Warm pools (issue 16): submit -> first script line and whole-job wall for the same 2-instance DDP job,
plain torchrun, Ray Train's TorchTrainer, shipyard cold and shipyard warm side by side; and a tuning job of
short trials with and without a warm pool.

    .venv/bin/python benchmarks/warm_start.py [--repeat 5] [--trials 20] [--json results.json]

The job is benchmarks/run.py's DDP script (2 instances x 2 processes, gloo, 10 steps of a small linear
model; every rank prints the time as its first statement, before it imports torch):
  torchrun      two `python -m torch.distributed.run --nnodes 2 --nproc_per_node 2` processes started
                together on this machine (two simulated nodes)
  ray           TorchTrainer(ScalingConfig(num_workers=4)) on a Ray cluster started beforehand in this
                process (its start is not counted); the training function does what the script does
                after init_process_group, which Ray Train makes itself
  shipyard cold PyTorch(..., instance_count=2, torch_distributed, 2 processes per host).fit(wait=True)
  shipyard warm the same with keep_alive_period_in_seconds: one unmeasured job makes the pool, every
                measured job reuses it (its WarmPoolStatus is checked)
Measured from just before the estimator (trainer, torchrun processes) is made: first line (the earliest
rank's first statement) and wall (until fit() returns or the processes exit). Variants alternate within
each repetition; medians over the repetitions. One unmeasured run of each comes first (page cache).

Tuning: HyperparameterTuner over a 1-instance PyTorch job that imports torch and prints its objective,
Random strategy, `--trials` jobs one at a time, with and without keep_alive_period_in_seconds; the wall of
fit(wait=True). SHIPYARD_HOME is a temporary directory."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import INSTANCES, PROCESSES, parse, run_torchrun, workspace  # noqa: E402

STEPS = 10
TRIAL = '''\
import argparse, time
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, default=0.0)
args, _ = parser.parse_known_args()
print(f"loss={(args.x - 0.3) ** 2 + float(torch.zeros(1)):.6f}", flush=True)
'''


def run_shipyard(source: Path, keep_alive: int | None) -> dict:
    from shipyard.pytorch import PyTorch
    from shipyard.store import Store

    t0 = time.time()
    estimator = PyTorch(
        entry_point="bench_ddp.py", source_dir=str(source), instance_count=INSTANCES, instance_type="local",
        hyperparameters={"steps": STEPS}, keep_alive_period_in_seconds=keep_alive, base_job_name="warm-bench",
        distribution={"torch_distributed": {"enabled": True, "processes_per_host": PROCESSES}},
    )
    with contextlib.redirect_stdout(io.StringIO()):
        estimator.fit(wait=True, logs="None")
    t_end = time.time()
    job = estimator.latest_training_job
    description = job.describe()
    logs = "".join(Store().log_path(job.name, h).read_text() for h in ("algo-1", "algo-2"))
    return {"t0": t0, "t_end": t_end, **parse(logs), "warm_pool": description.get("WarmPoolStatus"),
            "job": job.name}


def ray_train_function(config: dict) -> None:
    """benchmarks/run.py's script after init_process_group (Ray Train made the group)."""
    first = time.time()
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(config["steps"]):
        optimizer.zero_grad()
        model(torch.randn(16, 32)).pow(2).mean().backward()
        optimizer.step()
    total = torch.ones(1)
    dist.all_reduce(total)
    with open(config["out"], "a") as out:
        out.write(f"BENCH_START ts={first:.6f}\nBENCH_END rank={rank} world={int(total)} ts={time.time():.6f}\n")


def run_ray(workdir: Path) -> dict:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    out = workdir / f"ray-{time.time_ns()}.txt"
    t0 = time.time()
    trainer = TorchTrainer(ray_train_function, train_loop_config={"steps": STEPS, "out": str(out)},
                           scaling_config=ScalingConfig(num_workers=INSTANCES * PROCESSES, use_gpu=False),
                           torch_config=TorchConfig(backend="gloo"),
                           run_config=RunConfig(storage_path=str(workdir / "ray-results")))
    trainer.fit()
    t_end = time.time()
    return {"t0": t0, "t_end": t_end, **parse(out.read_text())}


def tune(source: Path, trials: int, keep_alive: int | None) -> float:
    from shipyard.pytorch import PyTorch
    from shipyard.tuner import ContinuousParameter, HyperparameterTuner

    estimator = PyTorch(entry_point="trial.py", source_dir=str(source), instance_type="local",
                        keep_alive_period_in_seconds=keep_alive, hang_timeout_seconds=60)
    tuner = HyperparameterTuner(estimator, "loss", {"x": ContinuousParameter(0.0, 1.0)},
                                metric_definitions=[{"Name": "loss", "Regex": r"loss=([0-9.]+)"}],
                                objective_type="Minimize", strategy="Random", max_jobs=trials,
                                max_parallel_jobs=1, random_seed=1)
    began = time.time()
    with contextlib.redirect_stdout(io.StringIO()):
        tuner.fit(wait=True)
    return time.time() - began


def measures(run: dict) -> dict:
    return {"first_line_s": run["first_start"] - run["t0"], "wall_s": run["t_end"] - run["t0"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    workdir, source = workspace("shipyard-warm-bench-")
    (source / "trial.py").write_text(TRIAL)
    import ray

    ray.init(num_cpus=INSTANCES * PROCESSES, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")
    keep = 600
    variants = {
        "torchrun": lambda: run_torchrun(source, STEPS, workdir),
        "ray": lambda: run_ray(workdir),
        "shipyard cold": lambda: run_shipyard(source, None),
        "shipyard warm": lambda: run_shipyard(source, keep),
    }
    try:
        for name, run in variants.items():   # unmeasured: page cache, lazy imports; the warm pool is made
            run()
            print(f"warmed up: {name}", file=sys.stderr)
        results: dict[str, list[dict]] = {name: [] for name in variants}
        for repetition in range(args.repeat):
            order = list(variants) if repetition % 2 == 0 else list(reversed(variants))
            for name in order:
                result = variants[name]()
                if name == "shipyard warm" and (result["warm_pool"] or {}).get("Status") != "Available":
                    raise RuntimeError(f"a warm run did not end with its pool kept: {result['warm_pool']}")
                results[name].append(result)
                print(f"{repetition + 1}/{args.repeat} {name}: " + ", ".join(
                    f"{k} {v:.3f}" for k, v in measures(result).items()), file=sys.stderr)
        from shipyard.store import Store

        reused = sum(1 for r in results["shipyard warm"]
                     if Store().events(r["job"]) and any("reusing warm pool" in e["message"]
                                                         for e in Store().events(r["job"])))
        ray.shutdown()
        tuning = {"cold": tune(source, args.trials, None), "warm": tune(source, args.trials, keep)}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    summary = {name: {key: statistics.median(measures(r)[key] for r in runs) for key in ("first_line_s", "wall_s")}
               for name, runs in results.items()}
    aborted = sum(r["aborted"] for r in results["torchrun"])
    report = {"repeat": args.repeat, "trials": args.trials, "medians": summary, "warm_runs_that_reused": reused,
              "torchrun_runs_lost_to_an_abort": aborted,
              "tuning_wall_s": tuning, "tuning_speedup": tuning["cold"] / tuning["warm"]}
    base = summary["torchrun"]
    print(f"\n{'':16}{'first line (s)':>16}{'wall (s)':>12}{'wall / torchrun':>18}")
    for name, values in summary.items():
        print(f"{name:16}{values['first_line_s']:>16.3f}{values['wall_s']:>12.3f}"
              f"{values['wall_s'] / base['wall_s']:>18.2f}")
    print(f"\nwarm runs that reused the pool: {reused} of {args.repeat}; plain torchrun runs lost to a rank's "
          f"SIGABRT at exit and run again: {aborted}")
    print(f"tuning, {args.trials} trials one at a time: cold {tuning['cold']:.1f} s, warm {tuning['warm']:.1f} s, "
          f"{report['tuning_speedup']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
