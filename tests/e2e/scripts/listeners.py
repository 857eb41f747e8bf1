"""Opens every listener a distributed job has and holds them open until the test has looked: torch's
store and gloo (from env:// under torchrun; under mpi, after mpi4py started MPI, from the rank variables
and MASTER_ADDR as Horovod-style scripts do). Each rank prints `rank R ready, store at port P`, then
waits for the file `release` in the job's directory (the one directory every instance sandbox shares)."""

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

if "OMPI_COMM_WORLD_RANK" in os.environ:
    from mpi4py import MPI

    MPI.COMM_WORLD.Barrier()  # every rank's TCP BTL is up
    dist.init_process_group(
        "gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
        rank=int(os.environ["OMPI_COMM_WORLD_RANK"]), world_size=int(os.environ["OMPI_COMM_WORLD_SIZE"]),
    )
else:
    dist.init_process_group("gloo")
value = torch.ones(1)
dist.all_reduce(value)  # every gloo pair is connected
print(f"rank {dist.get_rank()} ready, store at port {os.environ['MASTER_PORT']}", flush=True)
release = Path(os.environ["SHIPYARD_INSTANCE_DIR"]).parents[1] / "release"
deadline = time.monotonic() + 120
while not release.exists() and time.monotonic() < deadline:
    time.sleep(0.1)
dist.destroy_process_group()  # MPI is finalized by the clean exit (runtime/process_group_exit.py)
