"""What the profiler and the debugger cost per training step: the same 1-instance script as a job with
nothing on and with each kind of instrumentation, in turn, in one run:

    off           nothing asked (no hook, no monitor)
    profiler      the default profiler: system monitoring at 500 ms plus step times, phases and dataloader
                  waits (`ProfilerConfig(framework_profile_params=FrameworkProfile())`)
    debugger      the built-in collections weights, biases, gradients and losses at SageMaker's default
                  save_interval of 500 steps
    save-all/10   every tensor (`save_all`) saved every 10 steps (the SageMaker Debugger paper's setting)
    save-all      every tensor saved at every step

    .venv/bin/python benchmarks/instrumentation_overhead.py [--repeat 3] [--steps 400]

The script times its own training loop (after 20 warm-up steps) with time.perf_counter and prints
`BENCH_LOOP seconds=... steps=...`; the figure is the median seconds per step of each configuration and
the overhead is (configuration - off) / off. The order rotates between repetitions so drift in the
machine's load falls on all of them. Because a few per cent drown in a busy machine's noise, the
instrumentation's own costs are also measured directly: CPU time per step record, per system snapshot and
per step of the debugger hook between save steps. SHIPYARD_HOME is a temporary directory, removed at the
end."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

SCRIPT = """
    import argparse, time
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    args, _ = parser.parse_known_args()
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    loss_fn = nn.CrossEntropyLoss()  # a loss module, so the debugger's losses collection sees it
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = DataLoader(TensorDataset(torch.randn(args.steps * 64, 256), torch.randint(0, 10, (args.steps * 64,))),
                      batch_size=64)
    for step, (x, y) in enumerate(data, start=1):
        if step == 21:
            start = time.perf_counter()
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"BENCH_LOOP seconds={time.perf_counter() - start:.6f} steps={step - 20}", flush=True)
"""
BUILTIN = ("weights", "biases", "gradients", "losses")


def configurations() -> dict[str, dict]:
    """Estimator arguments of each configuration, by name."""
    from shipyard.debugger import CollectionConfig, DebuggerHookConfig
    from shipyard.profiler import FrameworkProfile, ProfilerConfig

    return {
        "off": {},
        "profiler": {"profiler_config": ProfilerConfig(framework_profile_params=FrameworkProfile())},
        "debugger": {"debugger_hook_config": DebuggerHookConfig(
            hook_parameters={"save_interval": "500"},
            collection_configs=tuple(CollectionConfig(name=n) for n in BUILTIN))},
        "save-all/10": {"debugger_hook_config": DebuggerHookConfig(
            hook_parameters={"save_all": "true", "save_interval": "10"})},
        "save-all": {"debugger_hook_config": DebuggerHookConfig(
            hook_parameters={"save_all": "true", "save_interval": "1"})},
    }


def run_once(source: Path, out: Path, steps: int, extra: dict) -> float:
    from shipyard.pytorch import PyTorch
    from shipyard.store import Store

    est = PyTorch(entry_point="train.py", source_dir=str(source), output_path=str(out),
                  hyperparameters={"steps": steps}, **extra)
    with contextlib.redirect_stdout(io.StringIO()):
        est.fit(wait=True, logs="None")
    log = Store().log_path(est.latest_training_job.name, "algo-1").read_text()
    seconds, count = re.search(r"BENCH_LOOP seconds=([\d.]+) steps=(\d+)", log).groups()
    return float(seconds) / int(count)


def profiler_costs(tmp: Path) -> tuple[float, float]:
    """The CPU seconds of one step record (the optimizer hook's listener) and of one system snapshot (the
    monitor thread), measured directly."""
    import json
    import time

    from shipyard.runtime.profiler.monitor import SystemMonitor
    from shipyard.runtime.profiler.steps import StepRecorder

    # the steady state: the default torch.profiler and cProfile steps (a one-time cost) left out
    steady = {"detailed_profiling_config": {"start_step": 10**9}, "python_profiling_config": {"start_step": 10**9}}
    os.environ["SHIPYARD_PROFILER_FRAMEWORK"] = json.dumps(steady)
    recorder = StepRecorder(str(tmp / "steps"), steady)
    n = 100_000
    start = time.process_time()
    for _ in range(n):
        recorder.on_step()
    per_step = (time.process_time() - start) / n
    monitor = SystemMonitor(tmp / "system", "algo-1", 500)
    monitor.sample()
    start = time.process_time()
    for _ in range(200):
        monitor.sample()
    return per_step, (time.process_time() - start) / 200


# The jobs' model on one fixed batch: without the DataLoader's gathers from a large tensor, whose cost
# varies by ±15 % from process to process, a difference of tens of microseconds can be seen.
HOOK_COST = """
    import sys, time
    import torch
    from torch import nn
    hooked, steps, out = sys.argv[1] == "1", int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    if hooked:  # what the injected sitecustomize does in a job, saving from step 0 only
        from shipyard.runtime.debugger.hook import Hook
        Hook(out, {"save_interval": "1000000000"}, {n: {} for n in %r}).install_global()
    for i in range(steps + 50):
        if i == 50:
            start = time.process_time()
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print((time.process_time() - start) / steps)
""" % (BUILTIN,)


def hook_cost(tmp: Path, steps: int = 1500, rounds: int = 5) -> tuple[float, float]:
    """CPU seconds per training step of the jobs' model without and with the zero-code-change hook installed,
    between save steps, in alternating fresh processes (a global hook cannot be taken off a process)."""
    import subprocess

    script = textwrap.dedent(HOOK_COST)
    times: dict[str, list[float]] = {"0": [], "1": []}
    for _ in range(rounds):
        for hooked in times:
            done = subprocess.run([sys.executable, "-c", script, hooked, str(steps), str(tmp / "tensors")],
                                  capture_output=True, text=True, check=True)
            times[hooked].append(float(done.stdout.split()[-1]))
    return statistics.median(times["0"]), statistics.median(times["1"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--configs", default="", help="comma-separated configurations to run (default: all)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SHIPYARD_HOME"] = str(Path(tmp) / "home")
        source = Path(tmp) / "src"
        source.mkdir()
        (source / "train.py").write_text(textwrap.dedent(SCRIPT))
        configs = configurations()
        names = [n for n in configs if not args.configs or n in args.configs.split(",")]
        times: dict[str, list[float]] = {name: [] for name in names}
        run_once(source, Path(tmp) / "out", 40, {})  # warm-up: page cache, lazy imports
        for i in range(args.repeat):
            for name in names[i % len(names):] + names[:i % len(names)]:
                times[name].append(run_once(source, Path(tmp) / "out", args.steps, configs[name]))
                print(f"run {i + 1} {name}: {times[name][-1] * 1e3:.3f} ms/step", file=sys.stderr)
        per_step, per_snapshot = profiler_costs(Path(tmp))
        plain, hooked = hook_cost(Path(tmp))
    off = statistics.median(times["off"])
    print("| configuration | median ms/step | vs off | runs (ms/step) |")
    print("|---|---:|---:|---|")
    for name in names:
        median = statistics.median(times[name])
        runs = ", ".join(f"{t * 1e3:.3f}" for t in times[name])
        print(f"| {name} | {median * 1e3:.3f} | {median / off:.3f}x ({100 * (median - off) / off:+.1f}%) | {runs} |")
    print(f"step record {per_step * 1e6:.2f} us CPU ({100 * per_step / off:.3f}% of a step); system snapshot "
          f"{per_snapshot * 1e3:.2f} ms CPU every 500 ms ({100 * per_snapshot / 0.5:.2f}% of one core)")
    print(f"debugger hook (zero-code-change) between save steps: {plain * 1e6:.1f} us/step plain, {hooked * 1e6:.1f} us/step hooked "
          f"({100 * (hooked - plain) / plain:+.1f}%)")


if __name__ == "__main__":
    main()
