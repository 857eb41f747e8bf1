"""The profiler's per-step overhead: the same 1-instance training script as a job with nothing on and
as a job with the default profiler (system monitoring at 500 ms plus step times and dataloader waits:
`ProfilerConfig(framework_profile_params=FrameworkProfile())`), alternating, in one run.

    .venv/bin/python benchmarks/profiler_overhead.py [--repeat 3] [--steps 400]

The script times its own training loop (after 20 warm-up steps) with time.perf_counter and prints
`BENCH_LOOP seconds=... steps=...`; the figure is the median seconds per step of each configuration
and the overhead is (profiled - off) / off. Because that difference drowns in a busy machine's noise, the
profiler's own costs are also measured directly: CPU time per step record and per system snapshot. SHIPYARD_HOME is a temporary directory, removed at the end."""

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
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = DataLoader(TensorDataset(torch.randn(args.steps * 64, 256), torch.randint(0, 10, (args.steps * 64,))),
                      batch_size=64)
    for step, (x, y) in enumerate(data, start=1):
        if step == 21:
            start = time.perf_counter()
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"BENCH_LOOP seconds={time.perf_counter() - start:.6f} steps={step - 20}", flush=True)
"""


def run_once(source: Path, out: Path, steps: int, profiled: bool) -> float:
    from shipyard.profiler import FrameworkProfile, ProfilerConfig
    from shipyard.pytorch import PyTorch
    from shipyard.store import Store

    extra = {"profiler_config": ProfilerConfig(framework_profile_params=FrameworkProfile())} if profiled else {}
    est = PyTorch(entry_point="train.py", source_dir=str(source), output_path=str(out),
                  hyperparameters={"steps": steps}, **extra)
    with contextlib.redirect_stdout(io.StringIO()):
        est.fit(wait=True, logs="None")
    log = Store().log_path(est.latest_training_job.name, "algo-1").read_text()
    seconds, count = re.search(r"BENCH_LOOP seconds=([\d.]+) steps=(\d+)", log).groups()
    return float(seconds) / int(count)


def costs(tmp: Path) -> tuple[float, float]:
    """What the profiler adds, measured directly (immune to the machine's noise): the CPU seconds of one
    step record (the optimizer hook's listener) and of one system snapshot (the monitor thread)."""
    import json
    import time

    from shipyard.profiler.monitor import SystemMonitor
    from shipyard.profiler.steps import StepRecorder

    os.environ["SHIPYARD_PROFILER_FRAMEWORK"] = json.dumps({})
    recorder = StepRecorder(str(tmp / "steps"), {})
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SHIPYARD_HOME"] = str(Path(tmp) / "home")
        source = Path(tmp) / "src"
        source.mkdir()
        (source / "train.py").write_text(textwrap.dedent(SCRIPT))
        times: dict[bool, list[float]] = {False: [], True: []}
        run_once(source, Path(tmp) / "out", 40, False)  # warm-up: page cache, lazy imports
        for i in range(args.repeat):
            for profiled in ((False, True) if i % 2 == 0 else (True, False)):
                times[profiled].append(run_once(source, Path(tmp) / "out", args.steps, profiled))
                print(f"run {i + 1} {'profiled' if profiled else 'off'}: {times[profiled][-1] * 1e3:.3f} ms/step",
                      file=sys.stderr)
        per_step, per_snapshot = costs(Path(tmp))
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(f"median ms/step  off {off * 1e3:.3f}  profiled {on * 1e3:.3f}  overhead {100 * (on - off) / off:+.1f}%")
    print(f"runs off {[round(t * 1e3, 3) for t in times[False]]} profiled {[round(t * 1e3, 3) for t in times[True]]}")
    print(f"step record {per_step * 1e6:.2f} us CPU ({100 * per_step / off:.3f}% of a step); system snapshot "
          f"{per_snapshot * 1e3:.2f} ms CPU every 500 ms ({100 * per_snapshot / 0.5:.2f}% of one core)")


if __name__ == "__main__":
    main()
