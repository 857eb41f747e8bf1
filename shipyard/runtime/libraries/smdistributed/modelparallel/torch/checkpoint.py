"""smp.save / smp.load (torch.save / torch.load with one file per model-parallel rank when partial), and
smp.save_checkpoint / smp.resume_from_checkpoint in SMP's layout:

    path/<tag>_partial/model_<mp_rank>.pt, optimizer_<mp_rank>.pt, user_content.pt   (partial)
    path/<tag>, path/user_content_<tag>                                              (full)
    path/newest                                                                      (the newest tag)"""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import torch

from shipyard.errors import ValidationError

from . import state

NEWEST = "newest"


def _file(f: Any, partial: bool, call: str) -> str:
    if not isinstance(f, (str, os.PathLike)):
        raise ValidationError(f"{call}.f", type(f).__name__, "must be a file name (SMP takes no file objects)")
    return f"{os.fspath(f)}_{state.mp_rank()}" if partial else os.fspath(f)


def save(obj: Any, f: str, partial: bool = True, pickle_module=pickle, pickle_protocol: int = 2) -> None:
    """partial=True: every model-parallel rank writes its own `<f>_<mp_rank>`; SMP saves on dp_rank 0 only."""
    torch.save(obj, _file(f, partial, "smp.save"), pickle_module=pickle_module, pickle_protocol=pickle_protocol)


def load(f: str, map_location=None, pickle_module=pickle, pickle_load_args: dict | None = None,
         partial: bool = True) -> Any:
    # The script's own files, which hold more than tensors (SMP's load is a plain unpickling too).
    return torch.load(_file(f, partial, "smp.load"), map_location=map_location, pickle_module=pickle_module,
                      weights_only=False, **(pickle_load_args or {}))


def save_checkpoint(path: str, tag: str, partial: bool = True, model=None, optimizer=None, user_content: Any = None,
                    translate_if_full: bool = True, num_kept_partial_checkpoints: int | None = None) -> None:
    """Every rank calls it. translate_if_full names SMP's translation to Hugging Face names, which
    applies to SMP's own distributed transformer modules only; shipyard keeps the model's names."""
    current = state.get("smp.save_checkpoint")
    model = model or current.model
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    if partial:
        directory = root / f"{tag}_partial"
        directory.mkdir(exist_ok=True)
        if state.dp_rank() == 0:
            if model is not None:
                torch.save(model.local_state_dict(), directory / f"model_{state.mp_rank()}.pt")
            if optimizer is not None:
                torch.save(optimizer.local_state_dict(), directory / f"optimizer_{state.mp_rank()}.pt")
        if state.rank() == 0:
            torch.save(user_content, directory / "user_content.pt")
    else:
        full = model.state_dict() if model is not None else None  # collective over the pipeline stages
        if state.rank() == 0:
            if full is not None:
                torch.save(full, root / tag)
            torch.save(user_content, root / f"user_content_{tag}")
    state.barrier()
    if state.rank() == 0:
        (root / NEWEST).write_text(tag)
        if partial and num_kept_partial_checkpoints:
            kept = sorted(root.glob("*_partial"), key=lambda d: d.stat().st_mtime)
            for older in kept[:-num_kept_partial_checkpoints]:
                shutil.rmtree(older)
    state.barrier()


def resume_from_checkpoint(path: str, tag: str | None = None, partial: bool = True, strict: bool = True,
                           load_optimizer: bool = True, load_sharded_optimizer_state: bool = True,
                           translate_function=None) -> Any:
    """Load the checkpoint `tag` (default: the newest) into the DistributedModel and DistributedOptimizer
    (once the model is partitioned, as in SMP); return its user_content."""
    if translate_function is not None:
        raise ValidationError("smp.resume_from_checkpoint.translate_function", translate_function,
                              "translating checkpoints is not served; load a checkpoint saved by this model")
    current = state.get("smp.resume_from_checkpoint")
    root = Path(path)
    if tag is None:
        if not (root / NEWEST).is_file():
            raise ValidationError("smp.resume_from_checkpoint.path", path, f"has no '{NEWEST}' file naming a "
                                  "checkpoint; pass tag=, or a path smp.save_checkpoint wrote")
        tag = (root / NEWEST).read_text().strip()
    if partial:
        directory = root / f"{tag}_partial"
        if current.model is not None:
            current.model.load_state_dict(torch.load(directory / f"model_{state.mp_rank()}.pt", weights_only=False),
                                          strict=strict)
        if load_optimizer and current.optimizer is not None:
            current.optimizer.load_state_dict(torch.load(directory / f"optimizer_{state.mp_rank()}.pt",
                                                         weights_only=False))
        return torch.load(directory / "user_content.pt", weights_only=False)
    if current.model is not None:
        current.model.load_state_dict(torch.load(root / tag, weights_only=False), strict=strict)
    return torch.load(root / f"user_content_{tag}", weights_only=False)
