"""shipyard vs plain torchrun, side by side, on the same 2-instance x 2-process DDP script.

    .venv/bin/python benchmarks/run.py [--repeat 3] [--json results.json]

Each repetition runs the script (a) as a shipyard job through the SDK (`PyTorch(...).fit(wait=True,
logs="None")`, local backend, 2 instances, torch_distributed with 2 processes per host) and (b) as two
`python -m torch.distributed.run --nnodes 2 --nproc_per_node 2 --node_rank {0,1}` processes started
together on this machine; the order alternates between repetitions so drift in the machine's load falls
on both. One unmeasured warm-up of each comes first (page cache, lazy imports).

Measured from the moment of submission (just before the estimator is built, or the two torchrun
processes are started):
  wall         until fit() returns / both torchrun processes have exited
  first line   until the earliest rank prints its first line (the script's first statement prints
               time.time(), before it imports torch)
  all ranks    until the last rank prints its first line

For shipyard, where the time goes: the job's SecondaryStatusTransitions, its TrainingStartTime (when the
controller starts the instances), and each agent's phase events (events/<host>.jsonl, sub-second
timestamps; the agent's `shipyard-agent` log lines only have whole seconds).
SHIPYARD_HOME is a temporary directory, removed at the end (--keep keeps it)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The DDP script of this benchmark and of ray_backend.py: rank 0 prints BENCH_STEP for the first and the
# last step; the model's and the batch's sizes are arguments (their defaults are this benchmark's).
SCRIPT = '''\
import time; print(f"BENCH_START ts={time.time():.6f}", flush=True)
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--inputs", type=int, default=32)
parser.add_argument("--outputs", type=int, default=4)
parser.add_argument("--batch", type=int, default=16)
args, _ = parser.parse_known_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"BENCH_INIT rank={rank} ts={time.time():.6f}", flush=True)
torch.manual_seed(0)
model = DDP(nn.Linear(args.inputs, args.outputs))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, args.steps + 1):
    optimizer.zero_grad()
    model(torch.randn(args.batch, args.inputs)).pow(2).mean().backward()  # one gradient allreduce per step
    optimizer.step()
    if rank == 0 and step in (1, args.steps):
        print(f"BENCH_STEP {step} ts={time.time():.6f}", flush=True)
total = torch.ones(1)
dist.all_reduce(total)
print(f"BENCH_END rank={rank} world={int(total)} ts={time.time():.6f}", flush=True)
dist.destroy_process_group()
'''

START = re.compile(r"BENCH_START ts=([0-9.]+)")
END = re.compile(r"BENCH_END rank=\d+ world=(\d+) ts=([0-9.]+)")
INSTANCES, PROCESSES = 2, 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(text: str) -> dict:
    starts = [float(m) for m in START.findall(text)]
    ends = END.findall(text)
    world = INSTANCES * PROCESSES
    if len(starts) != world or len(ends) != world or any(int(w) != world for w, _ in ends):
        raise RuntimeError(f"expected {world} ranks to start and finish; the output was:\n{text[-4000:]}")
    return {"first_start": min(starts), "last_start": max(starts), "last_end": max(float(t) for _, t in ends)}


def workspace(prefix: str, script: str = SCRIPT) -> tuple[Path, Path]:
    """A temporary directory, its home/ made this process's SHIPYARD_HOME, and its src/ holding `script`
    as bench_ddp.py: (the directory, src/)."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["SHIPYARD_HOME"] = str(workdir / "home")
    source = workdir / "src"
    source.mkdir()
    (source / "bench_ddp.py").write_text(script)
    return workdir, source


# -- (a) shipyard ------------------------------------------------------------------------------------
def run_shipyard(source: Path, steps: int) -> dict:
    from shipyard.pytorch import PyTorch
    from shipyard.store import Store

    captured = io.StringIO()
    t0 = time.time()
    estimator = PyTorch(
        entry_point="bench_ddp.py", source_dir=str(source), instance_count=INSTANCES, instance_type="local",
        hyperparameters={"steps": steps},
        distribution={"torch_distributed": {"enabled": True, "processes_per_host": PROCESSES}},
        base_job_name="bench",
    )
    try:
        with contextlib.redirect_stdout(captured):
            estimator.fit(wait=True, logs="None")
    except Exception:
        print(captured.getvalue(), file=sys.stderr)
        raise
    t_end = time.time()
    job = estimator.latest_training_job
    store = Store()
    logs = "".join(store.log_path(job.name, h).read_text() for h in ("algo-1", "algo-2"))
    marks = parse(logs)
    description = job.describe()
    return {"job": job.name, "t0": t0, "t_end": t_end, **marks, "stages": stages(store, job.name, description, t0)}


def stages(store, name: str, description: dict, t0: float) -> dict:
    """Seconds from submission to each milestone of the job, and the gaps between them."""
    def ts(value) -> float | None:
        return value.timestamp() if value is not None else None

    transitions = {t["Status"]: ts(t["StartTime"]) for t in description["SecondaryStatusTransitions"]}
    phase: dict[str, list[float]] = {"Downloading": [], "Training": []}
    exits = []
    for host in ("algo-1", "algo-2"):
        path = store.job_dir(name) / "events" / f"{host}.jsonl"
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "phase" and event.get("phase") in phase:
                phase[event["phase"]].append(event["ts"])
            elif event.get("event") == "exit":
                exits.append(event["ts"])
    points = {
        "created": ts(description["CreationTime"]),                 # store.create_job: validated, source uploaded
        "instances_started": ts(description["TrainingStartTime"]),  # controller up, about to start the agents
        "agents_up": max(phase["Downloading"]),                     # last agent running its first step
        "agents_launching": max(phase["Training"]),                 # last agent about to exec torchrun
        "status_training": transitions.get("Training"),
        "agents_exited": max(exits) if exits else None,
        "status_uploading": transitions.get("Uploading"),
        "status_completed": transitions.get("Completed"),
    }
    return {key: (value - t0 if value is not None else None) for key, value in points.items()}


# -- (b) plain torchrun ------------------------------------------------------------------------------
def run_torchrun(source: Path, steps: int, workdir: Path, tries: int = 3) -> dict:
    """Two torchrun processes started together. Plain torchrun sometimes loses a rank to SIGABRT in gloo's
    teardown at exit (pytorch#190489; shipyard's processes are protected from it) and the other node then
    waits in torchrun's exit barrier for minutes: such a run is counted (`aborted`) and run again."""
    for attempt in range(tries):
        port = free_port()
        outputs = [workdir / f"torchrun-node{rank}.log" for rank in range(INSTANCES)]
        t0 = time.time()
        processes = []
        for rank, output in enumerate(outputs):
            with open(output, "wb") as log:
                processes.append(subprocess.Popen(
                    [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(INSTANCES),
                     "--nproc_per_node", str(PROCESSES), "--node_rank", str(rank), "--master_addr", "127.0.0.1",
                     "--master_port", str(port), "bench_ddp.py", "--steps", str(steps)],
                    cwd=source, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                ))
        while any(p.poll() is None for p in processes) and all(p.poll() in (None, 0) for p in processes):
            time.sleep(0.01)
        t_end = time.time()
        if all(p.poll() == 0 for p in processes):
            return {"t0": t0, "t_end": t_end, **parse("".join(o.read_text() for o in outputs)), "aborted": attempt}
        for process in processes:
            process.kill()
            process.wait()
    raise RuntimeError(f"torchrun failed {tries} times in a row:\n{outputs[0].read_text()[-4000:]}")


# -- report ------------------------------------------------------------------------------------------
def measures(run: dict) -> dict:
    return {
        "wall_s": run["t_end"] - run["t0"],
        "first_line_s": run["first_start"] - run["t0"],
        "all_ranks_s": run["last_start"] - run["t0"],
        "after_script_s": run["t_end"] - run["last_end"],
    }


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(measures(r)[key] for r in runs)


def summarize(shipyard_runs: list[dict], torchrun_runs: list[dict]) -> dict:
    summary = {}
    for key in ("wall_s", "first_line_s", "all_ranks_s", "after_script_s"):
        s, t = median_of(shipyard_runs, key), median_of(torchrun_runs, key)
        summary[key] = {"shipyard": s, "torchrun": t, "ratio": s / t if t > 0 else None, "overhead_s": s - t}
    # The parts of the wall time that are shipyard's alone (nothing of torch runs in them), and so
    # far less noisy than the difference of two wall times: submit until the last agent execs
    # torchrun, and from the last agent's exit until fit() returns.
    before = statistics.median(r["stages"]["agents_launching"] for r in shipyard_runs)
    after = statistics.median(r["t_end"] - r["t0"] - r["stages"]["agents_exited"] for r in shipyard_runs)
    own = statistics.median(r["stages"]["agents_launching"] + r["t_end"] - r["t0"] - r["stages"]["agents_exited"]
                            for r in shipyard_runs)
    summary["shipyard_own_s"] = {"before_torchrun": before, "after_agents_exit": after, "total": own}
    stage_keys = shipyard_runs[0]["stages"].keys()
    summary["shipyard_stages_s"] = {
        key: statistics.median(r["stages"][key] for r in shipyard_runs if r["stages"][key] is not None)
        for key in stage_keys
    }
    return summary


LABELS = {
    "wall_s": "wall (submit to done)",
    "first_line_s": "submit to first script line",
    "all_ranks_s": "submit to all 4 ranks started",
    "after_script_s": "script end to done",
}

STAGE_LABELS = {
    "created": "job validated, source packed + uploaded, job row written",
    "instances_started": "controller process up, instances planned (TrainingStartTime)",
    "agents_up": "both agents (bwrap + python) running, phase Downloading",
    "agents_launching": "code + channels fetched, both agents exec torchrun",
    "status_training": "status Training recorded by the controller",
    "agents_exited": "both agents exited",
    "status_uploading": "status Uploading",
    "status_completed": "status Completed",
}


def print_report(summary: dict, repeat: int) -> None:
    print()
    print(f"shipyard vs torchrun, {INSTANCES} instances x {PROCESSES} processes, gloo, median of {repeat}")
    print(f"{'':32} {'shipyard':>9} {'torchrun':>9} {'ratio':>7} {'overhead':>9}")
    for key, label in LABELS.items():
        row = summary[key]
        ratio = f"{row['ratio']:.2f}x" if row["ratio"] is not None else "-"
        print(f"{label:32} {row['shipyard']:8.2f}s {row['torchrun']:8.2f}s {ratio:>7} {row['overhead_s']:+8.2f}s")
    own = summary["shipyard_own_s"]
    print()
    print(f"shipyard's own time (no torch running), median: {own['total']:.2f}s = "
          f"{own['before_torchrun']:.2f}s submit to torchrun exec + {own['after_agents_exit']:.2f}s "
          "agents exited to fit() returning")
    print()
    print("shipyard milestones, seconds after submit (median):")
    for key, label in STAGE_LABELS.items():
        value = summary["shipyard_stages_s"].get(key)
        if value is not None:
            print(f"  {value:6.2f}s  {label}")
    print(f"  {summary['wall_s']['shipyard']:6.2f}s  fit() returned")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="measured repetitions of each (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured runs of each first (default 1)")
    parser.add_argument("--steps", type=int, default=10, help="DDP steps in the script (default 10)")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the temporary SHIPYARD_HOME")
    args = parser.parse_args(argv)

    workdir, source = workspace("shipyard-bench-")
    print(f"SHIPYARD_HOME={os.environ['SHIPYARD_HOME']}; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}")

    runners = {"shipyard": lambda: run_shipyard(source, args.steps),
               "torchrun": lambda: run_torchrun(source, args.steps, workdir)}
    results: dict[str, list[dict]] = {"shipyard": [], "torchrun": []}
    try:
        for i in range(args.warmup):
            for name, runner in runners.items():
                run = measures(runner())
                print(f"warm-up {i + 1} {name:9} wall {run['wall_s']:6.2f}s  first line {run['first_line_s']:5.2f}s")
        for i in range(args.repeat):
            order = ["shipyard", "torchrun"] if i % 2 == 0 else ["torchrun", "shipyard"]
            for name in order:
                run = runners[name]()
                run["load_average"] = os.getloadavg()[0]
                results[name].append(run)
                m = measures(run)
                print(f"run {i + 1}/{args.repeat} {name:9} wall {m['wall_s']:6.2f}s  first line "
                      f"{m['first_line_s']:5.2f}s  all ranks {m['all_ranks_s']:5.2f}s  "
                      f"(load {run['load_average']:.2f})")
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    summary = summarize(results["shipyard"], results["torchrun"])
    print_report(summary, args.repeat)
    if args.json:
        from importlib.metadata import version

        document = {
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                        "python": platform.python_version(), "torch": version("torch")},
            "setup": {"instances": INSTANCES, "processes_per_host": PROCESSES, "steps": args.steps,
                      "repeat": args.repeat, "warmup": args.warmup},
            "summary": summary,
            "runs": {name: [{**r, "measures": measures(r)} for r in runs] for name, runs in results.items()},
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
