"""Start N local ranks of a script the way torchrun would (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT), without torchrun's extra agent process: the machine has 2 cores."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world: int, argv: list[str], workdir: Path, timeout: float = 300, extra_env=None,
              variables=None) -> list[str]:
    """Run `python argv` as `world` ranks; return each rank's output; raise if any failed.
    `variables(rank, world, port)` gives a launcher's variables (default: torchrun's)."""
    port = free_port()
    variables = variables or (lambda rank, world, port: {
        "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "RANK", "WORLD_SIZE", "OMPI_"))}
    processes, logs = [], []
    for rank in range(world):
        log = open(workdir / f"rank{rank}.log", "w+")
        env = {**base, "OMP_NUM_THREADS": "1", **(extra_env or {}), **variables(rank, world, port)}
        processes.append(subprocess.Popen([sys.executable, *argv], env=env, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL))
        logs.append(log)
    try:
        codes = [p.wait(timeout=timeout) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
    if any(codes):
        raise AssertionError(f"ranks exited {codes}:\n" + "\n".join(o[-3000:] for o in outputs))
    return outputs
