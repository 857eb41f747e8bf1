"""One rank (the first on algo-2) fails after the world has formed, after framework-like noise; the
others wait in a collective."""

import os

from mpi4py import MPI

import framework_noise

comm = MPI.COMM_WORLD
comm.barrier()
if os.environ["SM_CURRENT_HOST"] == "algo-2" and os.environ["OMPI_COMM_WORLD_LOCAL_RANK"] == "0":
    framework_noise.emit()
    raise ValueError(f"rank {comm.rank} fails on purpose")
comm.barrier()
