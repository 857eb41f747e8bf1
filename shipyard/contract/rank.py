"""Which rank a training process is, from what its launcher set: torchrun's RANK/WORLD_SIZE or mpirun's
OMPI_COMM_WORLD_RANK/SIZE. What saves or records per rank (the debugger hook, the step profiler) names
its files by it."""

from __future__ import annotations

import os

RANK_VARIABLES = {"RANK": "WORLD_SIZE", "OMPI_COMM_WORLD_RANK": "OMPI_COMM_WORLD_SIZE"}


def process_rank() -> tuple[int, int] | None:
    """(rank, world size), or None for a process no launcher gave a rank (a single process, or torchrun's
    own launcher process)."""
    for rank, size in RANK_VARIABLES.items():
        if rank in os.environ:
            return int(os.environ[rank]), int(os.environ.get(size, "1"))
    return None
