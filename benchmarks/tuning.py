"""Hyperparameter tuning: Random, Bayesian and Hyperband (with and without resume) side by side in one run,
on a small real model, and the tuning process's own time per trial.

    .venv/bin/python benchmarks/tuning.py [--seeds 1 2 3 4] [--max-jobs 30] [--parallel 3] [--json results.json]
    .venv/bin/python benchmarks/tuning.py --calibrate 100     # how TARGET was chosen

Every trial is a real shipyard job (local backend, one instance) running benchmarks/tuning_mlp.py: a
2-hidden-layer MLP on a generated regression task, tuned over the learning rate (1e-4 to 1e-1,
logarithmic), the width (8 to 128) and the batch size (16, 32, 64, 128), 27 epochs, the validation MSE
(`val_loss`) reported every epoch, a checkpoint saved every epoch and restored when present. Each strategy
runs as its own tuning job (`HyperparameterTuner(..., max_jobs, max_parallel_jobs, random_seed)`, with
TargetObjectiveMetricValue TARGET, and stopped by this script as soon as any trial reports a value at or
below it) for each seed, in a temporary SHIPYARD_HOME; Hyperband with
min_resource 1 (rungs at 1, 3 and 9 epochs, max_resource 27 from `epochs`), its promoted configurations
resuming from their checkpoints or, without resume, training again from epoch 1. With the same seed,
Random and both Hyperbands draw the same configurations in the same order (Optuna's RandomSampler), and
Bayesian (TPE) starts from the same ones, so the comparison is paired.

Measured from the store after each tuning job:
- trial-epochs to target: every value any trial's job emitted is one epoch trained (resumed jobs train
  only the epochs they have left; restarted ones train again from 1), counted across the tuning job's
  jobs in the order they were emitted until the first value <= TARGET. A tuning job that never reaches it
  counts all its epochs and is marked;
- wall to target: from fit() to that value, and the jobs the tuning job started by then;
- the tuner's time per trial: from a trial's job ending (its TrainingEndTime) to the next job's
  CreationTime, for every job the tuning process started into a slot an ending freed (the latest ending
  before it); and from fit() to the first job's CreationTime (validation, upload, the tuning process's
  start, the first proposal);
- Hyperband's pauses: how many epochs a paused job trained past its rung, the time from the rung's value
  being printed to the stop request and from the request to the job's end, and what promoted jobs trained.
Medians over the seeds (the tuner's gaps: over every gap of every seed); trial-epochs' ratio is each
strategy's median over Random's median. About 12 minutes on 2 cores with the defaults."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# The target validation MSE. Chosen with `--calibrate 100` (100 configurations drawn as Random draws them,
# 27 epochs each): 10 of them reach 0.165 (at epochs 16 to 25; the 10% quantile of the configurations' best
# values is 0.1650, the best 0.139), so Random reaches it within 30 configurations with probability
# 1 - 0.9^30 = 96%, and it takes a good configuration trained most of the way. Of those 10, 8 were in the
# top third of all 100 at epoch 1, 7 at epoch 3 and all 10 at epoch 9: early epochs tell something here.
TARGET = 0.165
EPOCHS = 27
METRIC = "val_loss"
VARIANTS = {  # name -> (strategy, Hyperband's resume)
    "Random": ("Random", None),
    "Bayesian": ("Bayesian", None),
    "Hyperband (resume)": ("Hyperband", True),
    "Hyperband (no resume)": ("Hyperband", False),
}


def ranges():
    from shipyard.tuner import CategoricalParameter, ContinuousParameter, IntegerParameter

    return {"lr": ContinuousParameter(1e-4, 1e-1, "Logarithmic"), "width": IntegerParameter(8, 128),
            "batch_size": CategoricalParameter([16, 32, 64, 128])}


def tune(source: Path, name: str, variant: str, seed: int, args) -> dict:
    """Run one tuning job to its end; what the store says about it."""
    from shipyard import Estimator
    from shipyard.store import Store
    from shipyard.store.tuning import TuningStore
    from shipyard.tuner import (HyperbandStrategyConfig, HyperparameterTuner, StrategyConfig,
                                TuningJobCompletionCriteriaConfig)

    strategy, resume = VARIANTS[variant]
    estimator = Estimator(entry_point="tuning_mlp.py", source_dir=str(source),
                          hyperparameters={"epochs": args.epochs, "min-epoch-seconds": args.epoch_seconds})
    tuner = HyperparameterTuner(
        estimator, METRIC, ranges(), metric_definitions=[
            {"Name": METRIC, "Regex": r"val_loss=([0-9.]+)"}, {"Name": "epoch_time", "Regex": r" time=([0-9.]+)"}],
        objective_type="Minimize", strategy=strategy, max_jobs=args.max_jobs, max_parallel_jobs=args.parallel,
        random_seed=seed,
        completion_criteria_config=TuningJobCompletionCriteriaConfig(target_objective_metric_value=args.target),
        strategy_config=None if resume is None else StrategyConfig(
            HyperbandStrategyConfig(min_resource=1, resume=resume)))
    store = Store()
    tuning = TuningStore(store)
    began = time.time()
    tuner.fit(job_name=name, wait=False)
    # The tuning job completes by itself once a trial ends at or below the target; stopping it as soon as
    # any trial reports such a value only spares the rest of that trial (nothing after it is counted).
    done, stopped = set(), False
    while not tuning.get(name).terminal:
        for trial in tuning.trials(name):
            if stopped or trial.job in done:
                continue
            if any(p["value"] <= args.target for p in store.metrics(trial.job, METRIC)):
                tuner.stop()
                stopped = True
            elif trial.state == "ended":
                done.add(trial.job)
        time.sleep(0.5)
    ended = time.time()
    trials = tuning.trials(name)
    jobs = {t.job: store.get_job(t.job) for t in trials}

    # Each epoch trained: (when its value was printed, the value, the job). The store's own timestamps
    # are when the job's controller read the log (the last values of a stopped job only once it ended),
    # so the order across jobs follows the `time=` each trial printed, recorded as a second metric.
    epochs_of: dict[str, list[tuple[float, float]]] = {}
    for t in trials:
        values = [p["value"] for p in store.metrics(t.job, METRIC)]
        printed = [p["value"] for p in store.metrics(t.job, "epoch_time")]
        if len(printed) != len(values):  # not expected: fall back on when shipyard read them
            printed = [p["ts"] for p in store.metrics(t.job, METRIC)]
        epochs_of[t.job] = list(zip(printed, values))
    points = sorted((ts, value, job) for job, pairs in epochs_of.items() for ts, value in pairs)
    epochs, reached_at = 0, None
    for ts, value, _job in points:
        epochs += 1
        if value <= args.target:
            reached_at = ts
            break

    created = sorted(r.creation_time for r in jobs.values())
    ends = sorted(r.training_end_time for r in jobs.values() if r.training_end_time)
    gaps = []
    for c in created:
        before = [e for e in ends if e <= c]
        if before:
            gaps.append(c - before[-1])

    # Hyperband: how near its rung a paused configuration stopped, and what its promotions trained.
    configs: dict[int, list] = {}
    for t in trials:
        configs.setdefault(t.number, []).append(t)
    requested = {}
    for event in store.events(f"tuning/{name}", kind="trial"):
        job, _, message = event["message"].partition(": ")
        if message.startswith("Hyperband: paused at"):
            requested[job] = event["ts"]
    pauses = []
    for jobs_ in configs.values():
        for i, t in enumerate(jobs_):
            rung = re.match(r"Hyperband: paused at (\d+) epochs", t.stop_reason or "")
            if not rung or t.job not in requested:
                continue
            curve = [e for u in (jobs_[:i + 1] if resume else [t]) for e in epochs_of[u.job]]
            rung = int(rung.group(1))
            pauses.append({"job": t.job, "rung": rung, "past_rung": len(curve) - rung,
                           "decision_s": requested[t.job] - curve[rung - 1][0] if len(curve) >= rung else None,
                           "stop_s": (jobs[t.job].training_end_time or requested[t.job]) - requested[t.job]})
    first_epochs = {}
    for t in trials:
        log = store.log_path(t.job, "algo-1")
        match = re.search(r"first_epoch=(\d+)", log.read_text() if log.exists() else "")
        first_epochs[t.job] = int(match.group(1)) if match else None
    later = [t.job for jobs_ in configs.values() for t in jobs_[1:]]
    record = tuning.get(name)
    return {
        "variant": variant, "seed": seed, "tuning_job": name, "status": record.status,
        "completion_reason": record.completion_reason,
        "trial_epochs": epochs, "reached": reached_at is not None, "total_epochs": len(points),
        "best": min((v for _, v, _ in points), default=None),
        "wall_to_target_s": (reached_at - began) if reached_at else None, "wall_s": ended - began,
        "jobs_to_target": sum(1 for r in jobs.values() if reached_at is None or r.creation_time <= reached_at),
        "jobs": len(jobs), "configurations": len(configs),
        "promoted_jobs": len(later), "promoted_first_epochs": [first_epochs[j] for j in later],
        "promoted_epochs": [len(epochs_of[j]) for j in later],
        "pauses": pauses,
        "fit_to_first_job_s": created[0] - began if created else None,
        "gaps_s": gaps,
    }


def calibrate(count: int, epochs: int, max_jobs: int) -> int:
    """Train `count` configurations drawn as Random draws them, in-process (no wait per epoch): the
    distribution of each one's best value over its epochs, how many reach TARGET, and whether those were
    in the top third at Hyperband's rungs (where it keeps a configuration going)."""
    import math

    from tuning_mlp import train

    rng = random.Random(0)
    curves = []
    for i in range(count):
        lr, width = 10 ** rng.uniform(-4, -1), rng.randint(8, 128)
        batch = rng.choice([16, 32, 64, 128])
        losses = train(lr, width, batch, epochs, log=lambda _: None)
        curves.append(losses)
        first = next((e for e, v in enumerate(losses, 1) if v <= TARGET), None)
        print(f"{i + 1:3d} lr={lr:.5f} width={width:3d} batch_size={batch:3d} best={min(losses):.4f} "
              f"epoch 1 {losses[0]:.3f}, 3 {losses[2]:.3f}, 9 {losses[8]:.3f}, {epochs} {losses[-1]:.3f}"
              + (f"  reaches {TARGET} at epoch {first}" if first else ""), flush=True)
    bests = sorted(min(c) for c in curves)
    print("quantiles of the best value per configuration: " + ", ".join(
        f"{q:.2f}: {bests[min(len(bests) - 1, math.floor(q * len(bests)))]:.4f}"
        for q in (0.05, 0.1, 0.15, 0.2, 0.3, 0.5)))
    reaching = [c for c in curves if min(c) <= TARGET]
    share = len(reaching) / len(curves)
    print(f"TARGET {TARGET}: reached by {len(reaching)} of {len(curves)} configurations ({share:.0%}); Random "
          f"reaches it within {max_jobs} configurations with probability {1 - (1 - share) ** max_jobs:.0%}")
    for rung in (1, 3, 9):
        cut = sorted(c[rung - 1] for c in curves)[len(curves) // 3 - 1]
        print(f"  of those, in the top third of all {len(curves)} at epoch {rung}: "
              f"{sum(c[rung - 1] <= cut for c in reaching)} of {len(reaching)}")
    return 0


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _fmt(value, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--max-jobs", type=int, default=30, help="configurations per tuning job")
    parser.add_argument("--parallel", type=int, default=3, help="max_parallel_jobs")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--epoch-seconds", type=float, default=0.25,
                        help="the trial's least time per epoch (its work, then a wait)")
    parser.add_argument("--target", type=float, default=TARGET)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--json", type=Path, help="write every tuning job's measurements here")
    parser.add_argument("--keep", action="store_true", help="keep the SHIPYARD_HOME (its path is printed)")
    parser.add_argument("--calibrate", type=int, metavar="N", help="instead: train N configurations in-process "
                        "and show how many reach the target")
    args = parser.parse_args()
    if args.calibrate:
        return calibrate(args.calibrate, args.epochs, args.max_jobs)

    home = Path(tempfile.mkdtemp(prefix="shipyard-tuning-bench-"))
    os.environ["SHIPYARD_HOME"] = str(home)
    source = home / "source"
    source.mkdir()
    shutil.copy(HERE / "tuning_mlp.py", source / "tuning_mlp.py")
    runs = []
    began = time.time()
    try:
        for seed in args.seeds:
            for index, variant in enumerate(args.variants):
                name = f"{VARIANTS[variant][0][:3].lower()}{'' if VARIANTS[variant][1] is not False else '-nr'}-s{seed}"
                run = tune(source, name, variant, seed, args)
                runs.append(run)
                print(f"seed {seed} {variant:22} trial-epochs {run['trial_epochs']:4d}"
                      f"{'' if run['reached'] else ' (not reached)'}, best {run['best']:.4f}, jobs {run['jobs']}, "
                      f"wall {run['wall_s']:.1f} s, median gap {_fmt(_median(run['gaps_s']), '.2f', ' s')}",
                      file=sys.stderr, flush=True)
    finally:
        if args.keep:
            print(f"SHIPYARD_HOME kept: {home}", file=sys.stderr)
        else:
            shutil.rmtree(home, ignore_errors=True)

    rows = {}
    for variant in args.variants:
        mine = [r for r in runs if r["variant"] == variant]
        rows[variant] = {
            "trial_epochs": _median([r["trial_epochs"] for r in mine]),
            "reached": sum(r["reached"] for r in mine), "of": len(mine),
            "wall_to_target_s": _median([r["wall_to_target_s"] if r["reached"] else r["wall_s"] for r in mine]),
            "jobs_to_target": _median([r["jobs_to_target"] for r in mine]),
            "gap_s": _median([g for r in mine for g in r["gaps_s"]]),
            "gaps": sum(len(r["gaps_s"]) for r in mine),
            "fit_to_first_job_s": _median([r["fit_to_first_job_s"] for r in mine]),
        }
    base = rows.get("Random", {}).get("trial_epochs")
    print(f"target val_loss <= {args.target}; {len(args.seeds)} seeds ({' '.join(map(str, args.seeds))}); "
          f"max_jobs {args.max_jobs}, max_parallel_jobs {args.parallel}, {args.epochs} epochs of >= "
          f"{args.epoch_seconds} s; total {time.time() - began:.0f} s")
    header = (f"{'strategy':22} {'trial-epochs':>12} {'vs Random':>9} {'reached':>8} {'wall to target':>14} "
              f"{'jobs':>5} {'tuner gap/trial':>15} {'fit to 1st job':>14}")
    print(header)
    for variant, row in rows.items():
        ratio = row["trial_epochs"] / base if base else None
        print(f"{variant:22} {row['trial_epochs']:12.0f} {_fmt(ratio, '8.2f', 'x'):>9} "
              f"{row['reached']:>4}/{row['of']:<3} {_fmt(row['wall_to_target_s'], '12.1f', ' s'):>14} "
              f"{row['jobs_to_target']:5.0f} {_fmt(row['gap_s'], '13.2f', ' s'):>15} "
              f"{_fmt(row['fit_to_first_job_s'], '12.2f', ' s'):>14}")
    print("per seed, trial-epochs (* not reached):")
    for variant in args.variants:
        print(f"  {variant:22} " + "  ".join(
            f"{r['trial_epochs']}{'' if r['reached'] else '*'}" for r in runs if r["variant"] == variant))
    for variant in ("Hyperband (resume)", "Hyperband (no resume)"):
        mine = [r for r in runs if r["variant"] == variant]
        if not mine:
            continue
        pauses = [p for r in mine for p in r["pauses"]]
        firsts = [(f, n) for r in mine for f, n in zip(r["promoted_first_epochs"], r["promoted_epochs"])]
        print(f"{variant}: {len(pauses)} pauses; epochs trained past the rung: median "
              f"{_fmt(_median([p['past_rung'] for p in pauses]), '.0f')} (max "
              f"{max((p['past_rung'] for p in pauses), default=0)}); rung's value to the stop request: median "
              f"{_fmt(_median([p['decision_s'] for p in pauses]), '.2f', ' s')}, request to the job's end: "
              f"{_fmt(_median([p['stop_s'] for p in pauses]), '.2f', ' s')}; {len(firsts)} promoted jobs, "
              f"first epochs {sorted(f for f, _ in firsts if f) or '-'}, "
              f"{sum(1 for _, n in firsts if n == 0)} stopped before training an epoch")
    if args.json:
        args.json.write_text(json.dumps({"target": args.target, "seeds": args.seeds, "max_jobs": args.max_jobs,
                                         "parallel": args.parallel, "epochs": args.epochs, "summary": rows,
                                         "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
