"""The built-in XGBoost algorithm's training, run on every instance (`python -m shipyard.algorithms xgboost`)
as SageMaker's algorithm container runs it (sagemaker-xgboost-container, algorithm_mode/train.py): it reads
what the platform wrote under /opt/ml (hyperparameters.json, inputdataconfig.json, resourceconfig.json, the
channels under input/data), trains on `train` with `validation` evaluated, prints each round's metrics, and
the leader writes model/xgboost-model. With a checkpoint directory it checkpoints every round and continues
from the newest checkpoint when it starts again (checkpoints.py).

On more than one instance the instances train one model together over XGBoost's own collective: algo-1 (the
first host) runs the tracker (`xgboost.tracker.RabitTracker`) on the job's port, and every instance joins it
as a worker, ranked by host name, with the rows it holds: a ShardedByS3Key channel's share, or all of a
FullyReplicated one (as on SageMaker, every worker then trains on a full copy). A host with no train data
joins with none, so the others' collective calls do not wait for it."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from shipyard.algorithms.xgboost import checkpoints
from shipyard.algorithms.xgboost import data as datasets
from shipyard.algorithms.xgboost import debug
from shipyard.algorithms.xgboost import hyperparameters as hp
from shipyard.algorithms.xgboost import metrics
from shipyard.contract.layout import Layout
from shipyard.errors import ValidationError

MODEL_FILE = "xgboost-model"
# How long the workers wait for each other at the tracker (one may load its data for longer).
TRACKER_WAIT_SECONDS = 300
TRAIN, VALIDATION = metrics.CHANNELS


def say(message: str) -> None:
    print(f"[xgboost] {message}", flush=True)


def main() -> int:
    layout = Layout(Path(os.environ.get("SM_INPUT_DIR", "/opt/ml/input")).parent)
    config = layout.input_config_dir
    raw = json.loads((config / "hyperparameters.json").read_text())
    channels = json.loads((config / "inputdataconfig.json").read_text())
    resources = json.loads((config / "resourceconfig.json").read_text())
    hosts, host = sorted(resources["hosts"]), resources["current_host"]
    # First, so that it listens by the time the other instances have loaded their data and join it.
    tracker = _start_tracker(hosts) if len(hosts) > 1 and host == hosts[0] else None
    try:
        params = hp.validate(raw)
        matrices = _load(layout, channels, params)
        folder = checkpoints.directory(layout)
        booster = _train(params, matrices, folder) if len(hosts) == 1 else \
            _distributed(params, matrices, folder, hosts, host)
    except ValidationError as exc:
        _fail(layout, f"ClientError: {exc}")
        return 2
    if tracker is not None:
        tracker.wait_for()
    if host == hosts[0]:
        layout.model_dir.mkdir(parents=True, exist_ok=True)
        # UBJSON, XGBoost 3's own format (Booster.load_model reads it by its content), without the warning
        # save_model gives for a file name that has no extension.
        (layout.model_dir / MODEL_FILE).write_bytes(booster.save_raw("ubj"))
        say(f"model written to {layout.model_dir / MODEL_FILE} ({booster.num_boosted_rounds()} rounds)")
    return 0


def _fail(layout: Layout, message: str) -> None:
    """As SageMaker's algorithms: the reason in output/failure (the job's FailureReason), and on stderr."""
    print(message, file=sys.stderr, flush=True)
    layout.failure_file.parent.mkdir(parents=True, exist_ok=True)
    layout.failure_file.write_text(message)


def _load(layout: Layout, channels: dict, params: dict[str, Any]) -> dict[str, Any]:
    """The train and validation matrices on this host (train None: no rows here)."""
    kinds = datasets.check_channels(channels)
    loaded = {}
    for name, kind in kinds.items():
        loaded[name] = datasets.load(layout.channel_dir(name), kind, name, bool(params.get("csv_weights")))
        rows = loaded[name].rows if loaded[name] is not None else 0
        say(f"channel {name}: {rows} rows ({kind}, {channels[name].get('S3DistributionType', 'FullyReplicated')})")
    if VALIDATION in loaded and loaded[VALIDATION] is None:
        raise ValidationError("channel validation", str(layout.channel_dir(VALIDATION)), "has no data files")
    if "early_stopping_rounds" in params and VALIDATION not in loaded:   # the channels and the hyperparameters
        raise ValidationError("hyperparameters['early_stopping_rounds']", params["early_stopping_rounds"],
                              "stops on the validation channel's metric; give a 'validation' channel")
    width = max(d.columns for d in loaded.values() if d is not None) if any(loaded.values()) else 0
    return {name: datasets.dmatrix(d, width) if d is not None else None for name, d in loaded.items()}


def _train(params: dict[str, Any], matrices: dict[str, Any], folder: Path | None):
    import xgboost

    train = matrices[TRAIN]
    if train is None:
        raise ValidationError("channel train", None, "has no data files")
    booster_params, notes = hp.booster_params(params)
    for note in notes:
        say(note)
    evals = [(matrix, name) for name, matrix in matrices.items() if matrix is not None]
    eval_metric = metrics.eval_metrics(params)
    if eval_metric:
        booster_params["eval_metric"] = eval_metric
    model, start = _resume(folder, params["num_round"])
    say(f"training {params['num_round'] - start} rounds on {train.num_row()} rows, {train.num_col()} features")
    # XGBoost counts the rounds of this call from 0: the callbacks add the rounds the checkpoint holds.
    callbacks = [metrics.printer(start)]
    if folder is not None:
        callbacks.append(checkpoints.saver(folder, start))
    saving = debug.hook(params, matrices.get(VALIDATION), start)
    if saving is not None:
        callbacks.append(saving)
    return xgboost.train(booster_params, train, num_boost_round=params["num_round"] - start, evals=evals,
                         early_stopping_rounds=params.get("early_stopping_rounds"), verbose_eval=False,
                         callbacks=callbacks, xgb_model=model)


def _resume(folder: Path | None, num_round: int) -> tuple[bytearray | None, int]:
    """The newest checkpoint's model and the rounds it holds (None, 0: train from round 0). Every instance
    restored the same checkpoints; should they differ, continuing would mix two models, so that fails."""
    from xgboost import collective

    model, start, name = checkpoints.latest(folder)
    if collective.get_world_size() > 1:
        leader = collective.broadcast(start, 0)
        if leader != start:
            raise RuntimeError(f"rank {collective.get_rank()} restored a checkpoint of {start} rounds, rank 0 one "
                               f"of {leader}: the instances' checkpoint directories differ")
    if start > num_round:   # another job's, through a checkpoint_s3_uri used again
        raise ValidationError("hyperparameters['num_round']", num_round,
                              f"the checkpoint {folder / name} holds {start} rounds already; give num_round >= {start} "
                              "or a checkpoint_s3_uri of this job's own")
    if model is not None:
        say(f"resuming from checkpoint {name} at round {start} of {num_round}")
    return model, start


def _tracker_address(hosts: list[str]) -> tuple[str, int]:
    """The tracker's IP address (XGBoost takes an address, not a host name) and port: the job's own
    (MASTER_ADDR and MASTER_PORT, from the launcher), where SageMaker's container uses a fixed 9099, since
    jobs here share the machine's ports."""
    return socket.gethostbyname(os.environ.get("MASTER_ADDR", hosts[0])), int(os.environ["MASTER_PORT"])


def _start_tracker(hosts: list[str]):
    from xgboost.tracker import RabitTracker

    address, port = _tracker_address(hosts)
    # Ranks follow the host names (dmlc_task_id), so algo-1 is rank 0, the leader that prints and saves.
    tracker = RabitTracker(n_workers=len(hosts), host_ip=os.environ.get("SHIPYARD_BIND_ADDRESS", address),
                           port=port, sortby="task")
    tracker.start()
    say(f"tracker on {hosts[0]} at {address}:{port} for {len(hosts)} workers")
    return tracker


def _distributed(params: dict[str, Any], matrices: dict[str, Any], folder: Path | None, hosts: list[str],
                 host: str):
    import xgboost
    from xgboost import collective

    address, port = _tracker_address(hosts)
    if matrices[TRAIN] is None:   # joins with no rows, so the others' collective calls are answered
        say(f"{host} holds no train data; it joins the workers with none")
        matrices = {**matrices, TRAIN: xgboost.DMatrix(_empty_like(matrices))}
    args = {"dmlc_tracker_uri": address, "dmlc_tracker_port": port, "dmlc_task_id": host,
            "dmlc_retry": 10, "dmlc_timeout": TRACKER_WAIT_SECONDS}
    with collective.CommunicatorContext(**args):
        say(f"worker {host}: rank {collective.get_rank()} of world size {collective.get_world_size()}")
        booster = _train(params, matrices, folder)
    return booster


def _empty_like(matrices: dict[str, Any]):
    import numpy as np

    validation = matrices.get(VALIDATION)
    return np.empty((0, validation.num_col() if validation is not None else 0), dtype=np.float32)
