"""The built-in XGBoost algorithm's checkpoints, as SageMaker's container keeps them (sagemaker-xgboost-container,
checkpointing.py): with a checkpoint directory (the job's CheckpointConfig.LocalPath, which the platform writes
to input/config/checkpointconfig.json when the job has `checkpoint_s3_uri`), the leader writes the model after
every round as `xgboost-checkpoint.<round>` and keeps the newest KEEP; an instance that starts again (a spot
interruption's new attempt) loads the newest one it can read and trains the rounds still missing, so the model
ends with `num_round` rounds whatever the interruptions. The platform syncs the directory with the URI
(runtime/checkpoints.py)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from shipyard.contract.layout import SANDBOX_BASE, Layout

NAME = "xgboost-checkpoint"
KEEP = 5   # SageMaker's max_to_keep
# Older checkpoints tried when the newest cannot be read (SageMaker's max_try).
TRIES = 5
_PATTERN = re.compile(rf"^{re.escape(NAME)}\.([0-9]+)$")


def directory(layout: Layout) -> Path | None:
    """The job's checkpoint directory as this process sees it (under the instance's own /opt/ml outside a
    sandbox), or None when the job has none."""
    config = layout.checkpointconfig_file
    if not config.is_file():
        return None
    local = Path(json.loads(config.read_text()).get("LocalPath") or SANDBOX_BASE / "checkpoints")
    return layout.base / local.relative_to(SANDBOX_BASE) if local.is_relative_to(SANDBOX_BASE) else local


def _rounds(folder: Path) -> list[int]:
    """The rounds checkpointed in `folder`, newest first."""
    found = (_PATTERN.match(p.name) for p in folder.iterdir()) if folder.is_dir() else ()
    return sorted((int(m.group(1)) for m in found if m), reverse=True)


def latest(folder: Path | None) -> tuple[bytearray | None, int, str | None]:
    """(the model, the rounds it holds, its file name) of the newest checkpoint that loads, trying up to
    TRIES of them; (None, 0, None) when there is none."""
    import xgboost

    for done in _rounds(folder)[:TRIES] if folder is not None else ():
        path = folder / f"{NAME}.{done}"
        # Read through Python's open, so the platform sees the restored checkpoint read (runtime/resume_check.py).
        with open(path, "rb") as f:
            raw = bytearray(f.read())
        try:
            xgboost.Booster().load_model(raw)
        except xgboost.core.XGBoostError:   # cut short: the one before it
            continue
        return raw, done + 1, path.name
    return None, 0, None


def saver(folder: Path, start: int):
    """An XGBoost callback writing the model after every round (`start` + the round of this training) on rank 0,
    and deleting the checkpoints older than the newest KEEP."""
    import xgboost

    folder.mkdir(parents=True, exist_ok=True)

    class SaveCheckpoint(xgboost.callback.TrainingCallback):
        def after_iteration(self, model, epoch: int, evals_log) -> bool:
            if xgboost.collective.get_rank() != 0:
                return False
            done = start + epoch
            path = folder / f"{NAME}.{done}"
            # Whole or absent: written aside, then renamed (the sync never uploads half a model).
            partial = folder / f".{path.name}.partial"
            partial.write_bytes(model.save_raw("ubj"))
            os.replace(partial, path)
            for old in _rounds(folder)[KEEP:]:
                (folder / f"{NAME}.{old}").unlink(missing_ok=True)
            return False

    return SaveCheckpoint()
