"""save_checkpoint / load_checkpoint: one directory per checkpoint, `<path>/step-<N>/`, written with
torch.distributed.checkpoint (each rank writes its own shard of sharded state, replicated state is
written once), a `meta.json` (the step, the strategies, the optimizer wrapper's state), and the empty
`.complete` marker last, as shipyard's checkpoint sync expects (docs/checkpoints.md): the sync never
uploads a marker before the files beside it, and restore skips directories without one.

ZeroRedundancyOptimizer's state is consolidated on rank 0 into `zero-optimizer.pt` (its shards are
laid out by rank, not by parameter name, so DCP cannot reshard them).

Every host's first process writes meta.json and the marker, after all ranks have written their files,
so a host's copy of a checkpoint directory is marked once that host's part is whole. With one
checkpoint directory per host synced to one URI, a marker can reach the URI before another host's
files, so load_checkpoint trusts a marked directory only when every file DCP's `.metadata` lists (all
ranks' shards) is there whole, and the ranks agree on one step: the newest that is loadable on all."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.optim import ZeroRedundancyOptimizer

from shipyard.contract.layout import MARKER
from shipyard.parallel import process_group
from shipyard.parallel.optimizer import ParallelOptimizer, inner

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
                "optimizer_state": _has_state(inner(optimizer)), "zero": isinstance(zero, ZeroRedundancyOptimizer),
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


def _step(directory: Path) -> int:
    return int(STEP_DIR.match(directory.name).group(1))


def _loadable(directory: Path) -> bool:
    """Whether a marked directory holds the whole checkpoint: meta.json, DCP's `.metadata` and, at least
    as long as `.metadata` says, every shard file it lists (every rank's), and the ZeRO file if any."""
    try:
        meta = json.loads((directory / "meta.json").read_text())
        storage = dcp.FileSystemReader(str(directory)).read_metadata().storage_data
    except (OSError, ValueError, EOFError, pickle.UnpicklingError):
        return False
    needed: dict[str, int] = {}
    for item in storage.values():
        needed[item.relative_path] = max(needed.get(item.relative_path, 0), item.offset + item.length)
    if meta.get("zero") and meta.get("optimizer_state"):
        needed[ZERO_FILE] = 1
    for name, size in needed.items():
        file = directory / name
        if not file.is_file() or file.stat().st_size < size:
            return False
    return True


def _agree(steps: set[int]) -> int:
    """The newest step in every rank's `steps`, -1 when there is none. Each round takes the minimum over
    the ranks of each one's newest candidate; a rank lacking that step (pruned, or partial there) makes
    the next round look below it."""
    if process_group.world_size() == 1:
        return max(steps, default=-1)
    below = None
    while True:
        mine = max((s for s in steps if below is None or s < below), default=-1)
        step = _all_reduce(mine, dist.ReduceOp.MIN)
        if not _all_reduce(int(step != -1 and step not in steps), dist.ReduceOp.MAX):
            return step
        below = step


def _all_reduce(value: int, op) -> int:
    tensor = torch.tensor([value], dtype=torch.int64, device=process_group.device())
    dist.all_reduce(tensor, op=op)
    return int(tensor.item())


def load_checkpoint(path: str | os.PathLike, model, optimizer=None) -> int:
    """Load the newest checkpoint under `path` that is whole on every rank into model (and optimizer);
    return its step, or 0 when there is none (a fresh start). Every rank must call it."""
    process_group.init()
    steps = {_step(d): d for d in complete_checkpoints(path) if _loadable(d)}
    step = _agree(set(steps))
    if step == -1:
        return 0
    directory = steps[step]
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
