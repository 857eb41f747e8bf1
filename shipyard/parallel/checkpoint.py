"""save_checkpoint / load_checkpoint: one directory per checkpoint, `<path>/step-<N>/`, written with
torch.distributed.checkpoint (each rank writes its own shard of sharded state, replicated state is
written once), a `meta.json` (the step, the strategies, the optimizer wrapper's state), and the empty
`.complete` marker last, as shipyard's checkpoint sync expects (docs/checkpoints.md): the sync never
uploads a marker before the files beside it, and restore skips directories without one.

ZeroRedundancyOptimizer's state is consolidated on rank 0 into `zero-optimizer.pt` (its shards are
laid out by rank, not by parameter name, so DCP cannot reshard them).

Every host's first process writes meta.json and the marker, after all ranks have written their files,
so a host's copy of a checkpoint directory is marked once that host's part is whole."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.optim import ZeroRedundancyOptimizer

from shipyard.parallel import process_group
from shipyard.parallel.optimizer import ParallelOptimizer, inner
from shipyard.runtime.checkpoints import MARKER

STEP_DIR = re.compile(r"^step-(\d+)$")
ZERO_FILE = "zero-optimizer.pt"
# Flattened: optimizer settings are saved per parameter name, so ranks that hold different parameters
# (pipeline stages) do not overwrite each other's param_groups.
OPTIONS = StateDictOptions(flatten_optimizer_state_dict=True)


def _local_leader() -> bool:
    return int(os.environ.get("LOCAL_RANK", "0")) == 0


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def _has_state(plain) -> bool:
    """Whether the optimizer has stepped: one that has not has no state to save (get_state_dict would
    invent some). ZeroRedundancyOptimizer keeps its state in its local optimizer."""
    if plain is None:
        return False
    return bool(plain.optim.state if isinstance(plain, ZeroRedundancyOptimizer) else plain.state)


def _states(model, optimizer) -> tuple[dict, dict]:
    plain = inner(optimizer)
    if isinstance(plain, ZeroRedundancyOptimizer) or not _has_state(plain):
        return get_state_dict(model, [], options=OPTIONS)[0], {}
    return get_state_dict(model, plain, options=OPTIONS)


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def save_checkpoint(path: str | os.PathLike, model, optimizer, step: int, *, keep_last: int | None = None) -> Path:
    """Write checkpoint `step` (the number of steps done) under `path`; every rank must call it.
    keep_last=K removes older checkpoints once this one is complete, keeping K."""
    process_group.init()
    directory = Path(path) / f"step-{step}"
    directory.mkdir(parents=True, exist_ok=True)
    model_state, optimizer_state = _states(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(directory))
    zero = inner(optimizer)
    if isinstance(zero, ZeroRedundancyOptimizer):
        zero.consolidate_state_dict(to=0)
        if process_group.rank() == 0:
            _atomic_write(directory / ZERO_FILE, lambda tmp: torch.save(zero.state_dict(), tmp))
    _barrier()
    if _local_leader():
        meta = {"step": step, "world_size": process_group.world_size(),
                "optimizer_state": _has_state(inner(optimizer)),
                "strategies": list(getattr(model, "shipyard_strategies", ())),
                "optimizer_extra": optimizer.extra_state() if isinstance(optimizer, ParallelOptimizer) else None}
        _atomic_write(directory / "meta.json", lambda tmp: tmp.write_text(json.dumps(meta)))
        (directory / MARKER).touch()
        if keep_last:
            for older in complete_checkpoints(path)[:-keep_last]:
                (older / MARKER).unlink()  # unmarked first, so nothing reads it half deleted
                shutil.rmtree(older)
    _barrier()
    return directory


def complete_checkpoints(path: str | os.PathLike) -> list[Path]:
    """Marked checkpoint directories under `path`, oldest step first."""
    root = Path(path)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), d) for d in root.iterdir() if (m := STEP_DIR.match(d.name)) and (d / MARKER).exists()]
    return [d for _, d in sorted(found)]


def load_checkpoint(path: str | os.PathLike, model, optimizer=None) -> int:
    """Load the newest complete checkpoint under `path` into model (and optimizer); return its step,
    or 0 when there is none (a fresh start). Every rank must call it."""
    process_group.init()
    found = complete_checkpoints(path)
    if not found:
        return 0
    directory = found[-1]
    meta = json.loads((directory / "meta.json").read_text())
    plain = inner(optimizer)
    with_optimizer = plain is not None and meta.get("optimizer_state", True)
    model_state = get_state_dict(model, [], options=OPTIONS)[0]
    state: dict[str, Any] = {"model": model_state}
    if with_optimizer and not isinstance(plain, ZeroRedundancyOptimizer):
        state["optimizer"] = get_state_dict(model, plain, options=OPTIONS)[1]
    dcp.load(state, checkpoint_id=str(directory))
    if with_optimizer and isinstance(plain, ZeroRedundancyOptimizer):
        plain.load_state_dict(torch.load(directory / ZERO_FILE, weights_only=False))
    optimizers = [plain] if "optimizer" in state else []
    set_state_dict(model, optimizers, model_state_dict=state["model"], optim_state_dict=state.get("optimizer", {}),
                   options=OPTIONS)
    if isinstance(optimizer, ParallelOptimizer) and meta.get("optimizer_extra"):
        optimizer.load_extra_state(meta["optimizer_extra"])
    return int(meta["step"])
