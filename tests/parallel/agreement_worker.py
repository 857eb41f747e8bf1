"""One rank of the agreement test: `python agreement_worker.py ROOT OUT`. The ranks save steps 1, 2 and 3
(each model's weights filled with its step) into ROOT/shared, then each loads from its own view,
ROOT/rank<N>, the way two hosts see their own restored copies: rank 0's step-3 is marked but lacks rank 1's
shard, rank 1's view lacks step-2 (pruned). The only step whole on both is 1; each rank saves what it got."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch

import shipyard.parallel as sp


def main() -> None:
    root, out = Path(sys.argv[1]), Path(sys.argv[2])
    sp.init(timeout_seconds=120)
    # Two tensors per layer and two layers: DCP spreads replicated tensors over the ranks, so both write one.
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    for step in (1, 2, 3):
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(step)
        sp.save_checkpoint(root / "shared", model, None, step=step)
    if sp.rank() == 0:
        for rank in (0, 1):
            shutil.copytree(root / "shared", root / f"rank{rank}")
        shards = sorted(p.name for p in (root / "rank0" / "step-3").glob("__1_*.distcp"))
        assert shards, "rank 1 wrote no shard"
        for name in shards:
            (root / "rank0" / "step-3" / name).unlink()
        shutil.rmtree(root / "rank1" / "step-2")
    torch.distributed.barrier()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    step = sp.load_checkpoint(root / f"rank{sp.rank()}", model, None)
    torch.save({"step": step, "values": sorted({float(v) for p in model.parameters() for v in p.flatten()})},
               out / f"rank{sp.rank()}.pt")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
