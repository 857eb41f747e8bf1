"""shipyard.parallel: turn a single-device PyTorch training script into data-parallel, sharded or
model-parallel training, with the strategy chosen in the job's configuration
(`distribution={"smdistributed": {"modelparallel": {"enabled": True, "parameters": {...}}}}`).

    import shipyard.parallel as sp
    sp.init()
    model, optimizer = sp.prepare(model, optimizer)
    loader = sp.shard(dataset, batch_size=32)
    start = sp.load_checkpoint("/opt/ml/checkpoints", model, optimizer)
    ...
    sp.save_checkpoint("/opt/ml/checkpoints", model, optimizer, step)

See docs/parallel/ for each strategy. Imports torch lazily: `import shipyard.parallel` costs nothing."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "init": "process_group", "rank": "process_group", "world_size": "process_group", "device": "process_group",
    "prepare": "preparation", "forward_backward": "preparation", "layout": "preparation",
    "shard": "data",
    "save_checkpoint": "checkpoint", "load_checkpoint": "checkpoint",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'shipyard.parallel' has no attribute {name!r}")
    return getattr(importlib.import_module(f"shipyard.parallel.{_EXPORTS[name]}"), name)


__all__ = sorted(_EXPORTS)
