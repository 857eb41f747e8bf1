"""The built-in XGBoost algorithm's debugger hook. When the job has a debugger hook config (the agent writes
debughookconfig.json and names it in SMDEBUG_CONFIG_FILE_PATH, runtime/debugger/agent.py), the leader saves,
at the rounds each collection's save config picks (TRAIN mode, the round as the step), smdebug's XGBoost
collections in the debugger's storage format (contract/debugger/storage.py), for the rules to read
(FeatureImportanceOverweight, TreeDepth, and the general ones such as LossNotDecreasing on metrics):

    metrics              train-rmse, validation-auc, ...        the round's evaluation
    feature_importance   feature_importance/<type>/f<i>         weight, gain, cover, total_gain, total_cover
    trees                trees/<column>                          Booster.trees_to_dataframe's numeric columns
    hyperparameters      hyperparameters/<name>                 the numeric ones
    labels, predictions  the validation channel's labels and the model's predictions of them

With include_workers=all every worker saves as worker_<rank>; otherwise the leader only, as worker_0."""

from __future__ import annotations

import json
import os
from typing import Any

from shipyard.contract.debugger import collections as coll
from shipyard.contract.debugger import modes
from shipyard.contract.debugger.save_config import SaveConfig
from shipyard.contract.debugger.storage import Writer, histogram

CONFIG_ENV = "SMDEBUG_CONFIG_FILE_PATH"
IMPORTANCE_TYPES = ("weight", "gain", "cover", "total_gain", "total_cover")
TREE_COLUMNS = ("Tree", "Node", "Split", "Gain", "Cover")


def hook(params: dict[str, Any], validation, start: int = 0) -> Any | None:
    """The XGBoost callback saving tensors, or None when the job asks for no debugging or this worker does
    not save. `start`: the rounds a checkpoint held, so that steps stay the model's rounds."""
    path = os.environ.get(CONFIG_ENV)
    if not path:
        return None
    from xgboost import collective

    with open(path) as f:
        config = json.load(f)
    hook_parameters = config.get("HookParameters") or {}
    rank, world = collective.get_rank(), collective.get_world_size()
    every_worker = hook_parameters.get("include_workers", "one") == "all"
    if rank != 0 and not every_worker:
        return None
    wanted = {c["CollectionName"]: c.get("CollectionParameters") or {}
              for c in config.get("CollectionConfigurations") or ()}
    save = SaveConfig.from_parameters(hook_parameters)
    reductions = coll.parse_reductions(hook_parameters.get("reductions", ""))
    raw = hook_parameters.get("save_raw_tensor", "false").lower() == "true"
    collections = [coll.build(name, p, save, reductions, raw) for name, p in wanted.items()]
    writer = Writer(config.get("LocalPath") or "/opt/ml/output/tensors", f"worker_{rank}")
    writer.write_collections({c.name: {"include_regex": [p.pattern for p in c.regex]} for c in collections},
                             world if every_worker else 1)
    return _callback(collections, writer, params, validation, start)


def _reduce(values, name: str) -> float:
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    if name.startswith("abs_"):
        values, name = np.abs(values), name[4:]
    if name == "l1":
        return float(np.abs(values).sum())
    if name == "l2":
        return float(np.sqrt((values ** 2).sum()))
    return float({"variance": np.var, "std": np.std}.get(name, getattr(np, name))(values))


def _callback(collections: list, writer: Writer, params: dict[str, Any], validation, start: int):
    import numpy as np
    import xgboost

    train_mode = modes.TRAIN.value

    class DebuggerHook(xgboost.callback.TrainingCallback):
        def after_iteration(self, model, epoch: int, evals_log) -> bool:
            step = start + epoch   # the model's round, counted over a checkpoint's rounds too
            due = [c for c in collections if c.save_config.should_save(train_mode, step)]
            if not due:
                return False
            raw, entries = {}, {}
            for name, value in tensors(model, step, evals_log).items():
                members = [c for c in due if c.matches(name)]
                if not members:
                    continue
                value = np.atleast_1d(np.asarray(value, dtype=np.float32))
                entry = {"shape": list(value.shape), "collections": [c.name for c in members],
                         "reductions": {r: _reduce(value, r) for c in members for r in c.reductions}}
                if any(c.save_raw_tensor for c in members):
                    raw[name] = value
                if any(c.save_histogram for c in members):
                    entry["histogram"] = histogram(value)
                entry["raw"] = name in raw
                entries[name] = entry
            writer.write_step(step, train_mode, step, raw, entries)
            return False

        def after_training(self, model):
            writer.close()
            return model

    def tensors(model, step: int, evals_log) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for channel, scores in evals_log.items():
            for metric, values in scores.items():
                found[f"{channel}-{metric}"] = values[-1]
        for kind in IMPORTANCE_TYPES:
            for feature, value in model.get_score(importance_type=kind).items():
                found[f"feature_importance/{kind}/{feature}"] = value
        if any(c.name == "trees" or c.matches("trees/Node") for c in collections):
            frame = model.trees_to_dataframe()
            for column in TREE_COLUMNS:
                found[f"trees/{column}"] = frame[column].to_numpy(dtype=np.float32)
        for name, value in params.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                found[f"hyperparameters/{name}"] = value
        if validation is not None and any(c.matches("predictions") or c.matches("labels") for c in collections):
            found["labels"] = validation.get_label()
            found["predictions"] = model.predict(validation, iteration_range=(0, step + 1))
        return found

    return DebuggerHook()
