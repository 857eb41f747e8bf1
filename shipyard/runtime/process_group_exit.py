"""Destroys a gloo default process group at exit, while the interpreter is still whole. Left to the
interpreter's finalization, gloo's threads can still hold tensors when Python is torn down and the
process aborts ("terminate called without an active exception", SIGABRT; pytorch#190489), so a script
that never calls destroy_process_group() could fail its job after training finished. gloo only: its
destroy is local, while destroying an NCCL group may wait for peers still in a collective."""

from __future__ import annotations

import atexit
import sys

_installed = False


def _destroy_gloo_group() -> None:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo":
            dist.destroy_process_group()
    except Exception:
        pass  # the process is exiting: nothing better to do


def install() -> None:
    """Once per process; the handler costs nothing where no group was made."""
    global _installed
    if not _installed:
        _installed = True
        atexit.register(_destroy_gloo_group)
