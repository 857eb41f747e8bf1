"""Run examples/strategies/torchrun/src/train.py (plain PyTorch DDP) as a 2-instance job under torchrun:

    .venv/bin/python examples/strategies/torchrun/run.py                  # 2 instances x 1 process
    .venv/bin/python examples/strategies/torchrun/run.py --processes 2    # 2 instances x 2 processes

`pytorchddp` instead of `torch_distributed` is the same launch here (docs/strategies/torchrun.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/strategies/common.py

from common import run  # noqa: E402

from shipyard.pytorch import PyTorch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--processes", type=int, default=1, help="processes per instance")
    args = parser.parse_args()
    estimator = PyTorch(entry_point="train.py", source_dir=str(Path(__file__).parent / "src"),
                        instance_count=args.instances, instance_type="local",
                        distribution={"torch_distributed": {"enabled": True, "processes_per_host": args.processes}},
                        hyperparameters={"epochs": 5, "lr": 0.05},
                        metric_definitions=[{"Name": "loss", "Regex": r"loss=([0-9.]+)"}],
                        base_job_name="strategy-torchrun")
    run(estimator, "torchrun")


if __name__ == "__main__":
    main()
