"""A process that used torch.distributed's gloo ends without the interpreter's teardown aborting it.

Left to the interpreter's finalization, gloo's threads can still hold tensors when Python is torn down
and the process aborts ("terminate called without an active exception", SIGABRT; pytorch#190489), so a
job could fail after training finished. Two steps, both at exit:

- a gloo default group still alive is destroyed while the interpreter is whole (a script that never
  calls destroy_process_group());
- the teardown can abort even after that (measured on torch 2.13: 2-5 of 20 four-rank torchrun runs on
  a loaded machine, with or without destroy_process_group()), so a process that made a group and is
  ending cleanly (no uncaught exception, no SystemExit with a non-zero code ever raised) flushes its
  open files and leaves with os._exit(0) once every other atexit handler has run. Any other ending
  goes through the normal teardown, so its exit status is always the interpreter's own.

gloo only (also under SMDDP's name on a machine without GPUs): destroying an NCCL group may wait for
peers still in a collective. Installed by the injected sitecustomize before anything else, so these handlers
run after every handler the script registers."""

from __future__ import annotations

import atexit
import builtins
import functools
import sys

_installed = False
_made_group = False     # this process called init_process_group()
_failing = False        # a SystemExit with a non-zero code was raised (caught or not)


class _RecordedSystemExit(builtins.SystemExit):
    """SystemExit as the script sees it, noting a non-zero code: at exit nothing else tells why the
    interpreter is ending (sys.last_value is set only for other exceptions)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        global _failing
        if self.code not in (None, 0):
            _failing = True


_RecordedSystemExit.__name__ = _RecordedSystemExit.__qualname__ = "SystemExit"


def _exit(code: object = None) -> None:
    """sys.exit, raising the recorded SystemExit."""
    raise _RecordedSystemExit(code)


def _watch_init(module) -> None:
    original = module.init_process_group

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        global _made_group
        _made_group = True
        return original(*args, **kwargs)

    module.init_process_group = init_process_group
    dist = sys.modules.get("torch.distributed")   # imported already (a warm zygote): its own name too
    if dist is not None and getattr(dist, "init_process_group", None) is original:
        dist.init_process_group = init_process_group


def _destroy_gloo_group() -> None:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized() and _on_gloo(dist):
            dist.destroy_process_group()
    except Exception:
        pass  # the process is exiting: nothing better to do


def _on_gloo(dist) -> bool:
    """The default group's collectives are gloo's: a "gloo" group, or one under another name that gloo
    carries on a machine without GPUs (SMDDP's "smddp" there)."""
    if dist.get_backend() == "gloo":
        return True
    import torch

    return not torch.cuda.is_available() and isinstance(dist.group.WORLD._get_backend(torch.device("cpu")),
                                                        dist.ProcessGroupGloo)


def _leave_cleanly() -> None:
    """os._exit(0) for a process that made a group and is ending cleanly, its files flushed first."""
    dist = sys.modules.get("torch.distributed")
    if not _made_group or _failing or getattr(sys, "last_value", None) is not None:
        return
    try:
        if dist is not None and dist.is_initialized():
            return  # a group other than gloo is still up: its own teardown decides
    except Exception:
        return
    import gc
    import io
    import os

    mpi = sys.modules.get("mpi4py.MPI")  # mpi4py finalizes at the C level, which os._exit skips
    try:
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            mpi.Finalize()  # else mpirun fails the job: "exited without calling finalize"
    except Exception:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            return  # a flush that fails would have made the exit status 120: the normal way then
    for obj in gc.get_objects():  # what finalization would flush: files the script left open
        # type(), not isinstance(): isinstance reads obj.__class__, which some objects (torch's deprecated
        # reduce_op) answer with a FutureWarning in every job's log.
        if issubclass(type(obj), io.IOBase):
            try:
                if not obj.closed and obj.writable():
                    obj.flush()
            except Exception:
                pass
    os._exit(0)


def install(at_start: bool = True) -> None:
    """Once per process; the handlers cost nothing where no group was made. `at_start`: installed before
    the script runs (by the sitecustomize), so the clean exit runs last; shipyard.parallel.init(), called
    later by a script that may run outside a job, only destroys the group."""
    global _installed
    if _installed:
        return
    _installed = True
    if at_start:
        from shipyard.runtime.import_hooks import after_import

        builtins.SystemExit = _RecordedSystemExit
        sys.exit = _exit
        after_import("torch.distributed.distributed_c10d",
                     lambda: _watch_init(sys.modules["torch.distributed.distributed_c10d"]))
        atexit.register(_leave_cleanly)  # registered first: runs last
    atexit.register(_destroy_gloo_group)
