"""Noticing a restart that ignores its checkpoint: when an instance restored checkpoints, every process
of the entry point marks the first time it reads a file under the checkpoint directory. An attempt that
trains (optimizer steps) or finishes without any such read most likely started again from step 0, and
the agent says so. Files are seen through Python's open (torch.load, numpy, pathlib, json all use it);
a loader that opens files natively is not seen, which is why this is a warning, not a failure."""

from __future__ import annotations

import builtins
import io
import os

_WRITE_MODES = set("wax+")


def install() -> None:
    watched = os.path.realpath(os.environ["SHIPYARD_CHECKPOINT_WATCH"]) + os.sep
    mark = os.environ["SHIPYARD_CHECKPOINT_READ_MARK"]
    original = builtins.open

    def watching_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)) and not _WRITE_MODES & set(str(mode)):
            path = os.fsdecode(os.fspath(file))
            if os.path.realpath(path).startswith(watched):
                builtins.open = io.open = original  # one read is enough: stop watching
                with original(mark, "w"):
                    pass
        return original(file, mode, *args, **kwargs)

    builtins.open = io.open = watching_open
