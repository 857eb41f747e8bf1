"""Run examples/strategies/mpi/src/train.py (a Horovod-style torch + mpi4py script) as a 2-instance
`mpi` job: one mpirun on algo-1, every rank inside its own instance.

    .venv/bin/python examples/strategies/mpi/run.py                   # 2 instances x 1 process
    .venv/bin/python examples/strategies/mpi/run.py --processes 2     # 2 instances x 2 processes

Needs OpenMPI (openmpi-bin) and the bubblewrap sandbox (docs/strategies/mpi.md)."""

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
    parser.add_argument("--processes", type=int, default=1, help="MPI ranks per instance")
    args = parser.parse_args()
    distribution = {"mpi": {"enabled": True, "processes_per_host": args.processes,
                            # added to mpirun's options (split as a shell would, never run by one): here one
                            # compute thread per rank, so ranks sharing an instance do not oversubscribe it
                            "custom_mpi_options": "-x OMP_NUM_THREADS=1"}}
    estimator = PyTorch(entry_point="train.py", source_dir=str(Path(__file__).parent / "src"),
                        instance_count=args.instances, instance_type="local", distribution=distribution,
                        hyperparameters={"epochs": 5, "lr": 0.05},
                        metric_definitions=[{"Name": "loss", "Regex": r"loss=([0-9.]+)"}],
                        base_job_name="strategy-mpi")
    run(estimator, "mpi")


if __name__ == "__main__":
    main()
