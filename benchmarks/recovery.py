"""Spot recovery and checkpoint sync, measured side by side in one run.

    .venv/bin/python benchmarks/recovery.py [--repeat 2] [--json results.json]

1. Recovery time: a 2-instance x 1-process DDP job (torch_distributed, gloo) with a 50 MB channel,
   interrupted (`request_interrupt`) once it is training, (a) taking the whole job's capacity, so every
   instance is replaced, and (b) taking algo-2 only, so algo-1 keeps its instance and rejoins. Recovery
   = from the interruption request to the first training step after it (the script prints a timestamp
   per step). Steps lost = the last step before the interruption minus the step the job resumed from
   (the script checkpoints every 20 steps and on the notice, so with the notice nothing is lost; a third
   variant does not checkpoint on the notice, losing the steps since its last periodic checkpoint).
2. Checkpoint sync cost: the same job's mean step time with and without `checkpoint_s3_uri` (the
   script writes a 4 MB checkpoint every 20 steps either way; with it, shipyard syncs continuously).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SCRIPT = textwrap.dedent('''
    import os, signal, sys, time
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ckpt_dir = "/opt/ml/checkpoints"
    path = os.path.join(ckpt_dir, "model.pt")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1024, 1024))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    if os.path.exists(path):
        state = torch.load(path)
        model.module.load_state_dict(state["model"])
        step = state["step"]
        print(f"RESUMED step={step} ts={time.time():.6f}", flush=True)
    def save():
        if rank == 0:
            os.makedirs(ckpt_dir, exist_ok=True)
            torch.save({"model": model.module.state_dict(), "step": step}, path + ".tmp")
            os.replace(path + ".tmp", path)
    def on_notice(*_):
        if os.environ.get("SAVE_ON_NOTICE") == "1":
            save()
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_notice)
    while step < int(os.environ.get("STEPS", "200")):
        loss = model(torch.randn(16, 1024)).pow(2).mean()
        optimizer.zero_grad(); loss.backward(); optimizer.step()
        step += 1
        print(f"STEP step={step} ts={time.time():.6f}", flush=True)
        if step % 20 == 0:
            save()
''')
STEP = re.compile(r"^STEP step=(\d+) ts=([0-9.]+)$")
RESUMED = re.compile(r"^RESUMED step=(\d+) ts=([0-9.]+)$")


def make_job(work: Path, steps: int, checkpoints: bool, spot: bool, save_on_notice: bool = True):
    from shipyard.pytorch import PyTorch

    source = work / "src"
    source.mkdir(exist_ok=True)
    (source / "train.py").write_text(SCRIPT)
    data = work / "data"
    if not data.exists():
        data.mkdir()
        for i in range(10):
            (data / f"part-{i}.bin").write_bytes(os.urandom(5 * 1024 * 1024))
    kwargs = dict(use_spot_instances=True, max_run=3600, max_wait=7200, interruption_notice_seconds=30) if spot else {}
    if checkpoints:
        kwargs["checkpoint_s3_uri"] = f"file://{work / 'ckpt' / str(time.time_ns())}"
    elif spot:
        kwargs["spot_without_checkpoints"] = True
    est = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=2, stop_grace_seconds=10,
                  distribution={"torch_distributed": {"enabled": True}},
                  environment={"STEPS": str(steps), "SAVE_ON_NOTICE": "1" if save_on_notice else "0"},
                  **kwargs)
    return est, {"train": f"file://{data}"}


def log_lines(store, name: str, host: str = "algo-1") -> list[str]:
    path = store.log_path(name, host)
    return path.read_text(errors="replace").splitlines() if path.exists() else []


def recovery_run(work: Path, host: str | None, save_on_notice: bool = True) -> dict:
    from shipyard.store import Store

    est, inputs = make_job(work, steps=200, checkpoints=True, spot=True, save_on_notice=save_on_notice)
    est.fit(inputs, wait=False)
    name, store = est.latest_training_job.name, Store()
    while not any(STEP.match(line) and int(STEP.match(line)[1]) >= 30 for line in log_lines(store, name)):
        time.sleep(0.1)
    requested = time.time()
    store.request_interrupt(name, host)
    description = est.latest_training_job.wait(logs=False, quiet=True)
    assert description["TrainingJobStatus"] == "Completed", description.get("FailureReason")
    lines = log_lines(store, name)
    resumed = [m for m in map(RESUMED.match, lines) if m][-1]
    resumed_at = float(resumed[2])
    old = [int(m[1]) for m in map(STEP.match, lines) if m and float(m[2]) < resumed_at]
    new = [float(m[2]) for m in map(STEP.match, lines) if m and float(m[2]) > resumed_at]
    # Training goes on until the notice arrives, so the old process's last step counts, not the request's.
    return {"recovery_s": new[0] - requested, "steps_lost": max(0, max(old) - int(resumed[1])),
            "attempts": len(description["Shipyard"]["Attempts"])}


def step_time_run(work: Path, checkpoints: bool) -> float:
    from shipyard.store import Store

    est, inputs = make_job(work, steps=300, checkpoints=checkpoints, spot=False)
    est.fit(inputs, wait=False)
    est.latest_training_job.wait(logs=False, quiet=True)
    times = [float(m[2]) for m in map(STEP.match, log_lines(Store(), est.latest_training_job.name)) if m]
    gaps = [b - a for a, b in zip(times[10:], times[11:])]  # skip warm-up steps
    return statistics.mean(gaps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="shipyard-recovery-") as tmp:
        os.environ["SHIPYARD_HOME"] = str(Path(tmp) / "home")
        work = Path(tmp)
        results = {"whole": [], "lost_only": [], "no_notice_save": [], "step_plain": [], "step_sync": []}
        for i in range(args.repeat):
            for kind, host in (("whole", None), ("lost_only", "algo-2"))[:: 1 if i % 2 == 0 else -1]:
                results[kind].append(recovery_run(work, host))
                print(f"run {i + 1} {kind:9s} {results[kind][-1]}", flush=True)
            results["no_notice_save"].append(recovery_run(work, "algo-2", save_on_notice=False))
            print(f"run {i + 1} no notice checkpoint {results['no_notice_save'][-1]}", flush=True)
            for kind, sync in (("step_plain", False), ("step_sync", True))[:: 1 if i % 2 == 0 else -1]:
                results[kind].append(step_time_run(work, sync))
                print(f"run {i + 1} {kind:10s} mean step {results[kind][-1] * 1000:.2f} ms", flush=True)
    med = statistics.median
    summary = {
        "recovery_whole_s": med(r["recovery_s"] for r in results["whole"]),
        "recovery_lost_only_s": med(r["recovery_s"] for r in results["lost_only"]),
        "steps_lost_whole": max(r["steps_lost"] for r in results["whole"]),
        "steps_lost_lost_only": max(r["steps_lost"] for r in results["lost_only"]),
        "steps_lost_without_notice_checkpoint": med(r["steps_lost"] for r in results["no_notice_save"]),
        "step_ms_plain": med(results["step_plain"]) * 1000,
        "step_ms_with_sync": med(results["step_sync"]) * 1000,
    }
    summary["sync_slowdown_pct"] = (summary["step_ms_with_sync"] / summary["step_ms_plain"] - 1) * 100
    print(f"\nmedian of {args.repeat}, 2 instances x 1 process, {os.cpu_count()} CPUs")
    print(f"recovery, whole job replaced       {summary['recovery_whole_s']:7.2f} s   steps lost {summary['steps_lost_whole']}")
    print(f"recovery, lost instance replaced   {summary['recovery_lost_only_s']:7.2f} s   steps lost {summary['steps_lost_lost_only']}")
    print(f"steps lost, no checkpoint on the notice (median; checkpoints every 20 steps) "
          f"{summary['steps_lost_without_notice_checkpoint']}")
    print(f"mean step, no checkpoint sync      {summary['step_ms_plain']:7.2f} ms")
    print(f"mean step, continuous sync         {summary['step_ms_with_sync']:7.2f} ms   ({summary['sync_slowdown_pct']:+.1f}%)")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "runs": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
