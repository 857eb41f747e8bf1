"""init() joins the process group from whichever launcher started the process: torchrun's variables,
mpirun's OMPI_COMM_WORLD_* (as Horovod-style scripts under the mpi launcher), or none (a world of one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from ranks import run_ranks  # noqa: E402

SCRIPT = """
import torch, shipyard.parallel as sp
sp.init(timeout_seconds=60)
total = torch.tensor([float(sp.rank() + 1)])
torch.distributed.all_reduce(total)
print(f"rank={sp.rank()} world={sp.world_size()} sum={int(total)} backend={torch.distributed.get_backend()}")
"""


def _mpirun(rank: int, world: int, port: int) -> dict[str, str]:
    return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(world),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(rank), "SM_HOSTS": '["127.0.0.1"]', "MASTER_PORT": str(port)}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "mpirun"])
def test_init_from_the_launchers_variables(tmp_path, launcher):
    outputs = run_ranks(2, ["-c", SCRIPT], tmp_path, variables=_mpirun if launcher == "mpirun" else None)
    for rank, output in enumerate(outputs):
        assert f"rank={rank} world=2 sum=3 backend=gloo" in output


AT_EXIT = """
import atexit, torch.distributed as dist
atexit.register(lambda: print("initialized at exit:", dist.is_initialized()))  # runs after init()'s handler
import shipyard.parallel as sp
sp.init()
"""


def test_a_gloo_group_is_destroyed_at_exit_before_the_interpreter_is_torn_down():
    """Left to the interpreter's teardown, gloo can abort the process (SIGABRT) after the script ended."""
    result = subprocess.run([sys.executable, "-c", AT_EXIT], capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0 and "initialized at exit: False" in result.stdout, result.stderr


def test_init_without_a_launcher_is_a_world_of_one():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin"})
    assert "rank=0 world=1 sum=1 backend=gloo" in result.stdout, result.stderr
