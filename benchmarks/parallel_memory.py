"""Per-rank memory of parameters, gradients and optimizer state under DDP, ZeRO-1 and full sharding
(FSDP), next to the formula each should follow, through shipyard.parallel on N gloo ranks (CPU).

    .venv/bin/python benchmarks/parallel_memory.py [--world 2] [--layers 12] [--hidden 4096] [--json out.json]

The model is `layers` Linear(hidden, hidden) layers (12 x 4096: 201M parameters), fp32, Adam. After one
training step each rank counts the bytes of its own tensors (a DTensor's local shard): parameters,
`.grad`s, and the optimizer's state (exp_avg, exp_avg_sq, step). With P parameters on N ranks, Adam:

    DDP     params 4P       grads 4P       optimizer 8P        (+ DDP's gradient buckets, 4P, not counted)
    ZeRO-1  params 4P       grads 4P       optimizer 8P / N
    FSDP    params 4P / N   grads 4P / N   optimizer 8P / N

It also reports each rank's peak resident memory (ru_maxrss), which includes the full model every
strategy starts from and torch itself. Each strategy runs in its own torchrun, one after the other."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from run import free_port  # noqa: E402

STRATEGIES = {"ddp": {"ddp": True}, "zero1": {"shard_optimizer_state": True}, "fsdp": {}}  # fsdp: degree N
FORMULA = {  # bytes per parameter for (params, grads, optimizer) at world size n
    "ddp": lambda n: (4, 4, 8),
    "zero1": lambda n: (4, 4, 8 / n),
    "fsdp": lambda n: (4 / n, 4 / n, 8 / n),
}


def local_bytes(tensor) -> int:
    from torch.distributed.tensor import DTensor

    if isinstance(tensor, DTensor):
        tensor = tensor.to_local()
    return tensor.numel() * tensor.element_size()


def optimizer_state(optimizer) -> dict:
    from torch.distributed.optim import ZeroRedundancyOptimizer

    plain = optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer
    return plain.state


def worker(strategy: str, layers: int, hidden: int, out: Path) -> None:
    import torch
    from torch import nn

    import shipyard.parallel as sp

    sp.init()
    world = sp.world_size()
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(hidden, hidden) for _ in range(layers)))
    count = sum(p.numel() for p in model.parameters())
    parameters = STRATEGIES[strategy] or {"hybrid_shard_degree": world}
    model, optimizer = sp.prepare(model, torch.optim.Adam(model.parameters(), lr=1e-4), **parameters)
    model(torch.randn(4, hidden)).pow(2).mean().backward()
    optimizer.step()
    measured = {
        "params": sum(local_bytes(p) for p in model.parameters()),
        "grads": sum(local_bytes(p.grad) for p in model.parameters() if p.grad is not None),
        "optimizer": sum(local_bytes(v) for state in optimizer_state(optimizer).values()
                         for v in state.values() if isinstance(v, torch.Tensor)),
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    (out / f"{strategy}-rank{sp.rank()}.json").write_text(json.dumps(
        {"rank": sp.rank(), "world": world, "parameters": count, "measured": measured,
         "strategies": list(model.shipyard_strategies)}))
    torch.distributed.destroy_process_group()


def launch(strategy: str, args, out: Path) -> list[dict]:
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.world),
            "--master_addr", "127.0.0.1", "--master_port", str(free_port()), __file__, "--worker", strategy,
            "--layers", str(args.layers), "--hidden", str(args.hidden), "--out", str(out)]
    subprocess.run(argv, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return [json.loads((out / f"{strategy}-rank{r}.json").read_text()) for r in range(args.world)]


def mib(n: float) -> str:
    return f"{n / 2**20:9.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.layers, args.hidden, args.out)
        return 0

    results = {}
    with tempfile.TemporaryDirectory(prefix="shipyard-memory-") as tmp:
        for strategy in STRATEGIES:
            results[strategy] = launch(strategy, args, Path(tmp))
    count = results["ddp"][0]["parameters"]
    spread = max(abs(r["measured"][k] - ranks[0]["measured"][k]) / max(ranks[0]["measured"][k], 1)
                 for ranks in results.values() for r in ranks for k in ("params", "grads", "optimizer"))
    print(f"\n{count / 1e6:.0f}M parameters (fp32, Adam), world size {args.world}; MiB per rank, "
          f"measured / formula (rank 0; the other ranks differ by at most {spread:.1%})")
    print(f"{'':8}{'params':>20}{'grads':>20}{'optimizer':>20}{'peak RSS':>11}")
    for strategy, ranks in results.items():
        m = ranks[0]["measured"]
        formula = [b * count for b in FORMULA[strategy](args.world)]
        cells = "".join(f"{mib(m[key])} / {mib(f).strip():>8}" for key, f in zip(("params", "grads", "optimizer"), formula))
        print(f"{strategy:8}{cells}{mib(m['peak_rss'])}")
    ddp_opt = results["ddp"][0]["measured"]["optimizer"]
    for strategy in ("zero1", "fsdp"):
        shares = [r["measured"]["optimizer"] / ddp_opt for r in results[strategy]]
        print(f"{strategy}: optimizer state per rank / DDP's = {', '.join(f'{s:.3f}' for s in shares)} "
              f"(1/N = {1 / args.world:.3f})")
    if args.json:
        args.json.write_text(json.dumps({"command": " ".join(sys.argv), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
