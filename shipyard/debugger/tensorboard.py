"""Export a trial's tensors to TensorBoard event files, laid out as SageMaker's `tensorboard/<MODE>/`:

    <out>/<MODE>/<worker>/events.out.tfevents.<unix time>.shipyard    MODE: TRAIN, EVAL, PREDICT, GLOBAL

one TensorBoard run per mode and worker, with the mode step as TensorBoard's step. Each saved tensor
gives, at each step it was saved:
- a scalar `<tensor>` when its raw value has one element (losses);
- a histogram `<tensor>` when it has more: the stored histogram (save_histogram=true), else the same
  histogram computed from the raw value (storage.histogram); the histogram's sum and sum of squares are
  taken at the bin centres (the values themselves may not have been kept);
- a scalar `<tensor>/<reduction>` for each saved reduction (`mean`, `abs_max`, `l2`, ...).

Written with tensorboard's protobuf classes and its TFRecord framing (RecordWriter): TensorFlow is not
imported."""

from __future__ import annotations

import math
import socket
import time
from pathlib import Path


class _Runs:
    """One open event file per (mode, worker)."""

    def __init__(self, out: Path) -> None:
        self.out, self.writers, self.paths = out, {}, []

    def write(self, mode: str, worker: str, step: int, values: list) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        if not values:
            return
        writer = self.writers.get((mode, worker))
        if writer is None:
            writer = self.writers[(mode, worker)] = self._open(mode, worker)
        event = event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=values))
        writer.write(event.SerializeToString())

    def _open(self, mode: str, worker: str):
        from tensorboard.compat.proto import event_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        run = self.out / mode.upper() / worker
        run.mkdir(parents=True, exist_ok=True)
        path = run / f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.shipyard"
        self.paths.append(path)
        writer = RecordWriter(open(path, "wb"))  # noqa: SIM115 (closed in close())
        writer.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
        return writer

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


def _histogram(tag: str, edges: list[float], counts: list[int]):
    from tensorboard.compat.proto import summary_pb2

    centres = [(lo + hi) / 2 for lo, hi in zip(edges, edges[1:])]
    proto = summary_pb2.HistogramProto(
        min=edges[0], max=edges[-1], num=sum(counts),
        sum=sum(c * n for c, n in zip(centres, counts)),
        sum_squares=sum(c * c * n for c, n in zip(centres, counts)),
        bucket_limit=edges[1:], bucket=counts)
    return summary_pb2.Summary.Value(tag=tag, histo=proto)


def _values(trial, step: int, worker: str, tensors: dict) -> list:
    from tensorboard.compat.proto import summary_pb2

    from shipyard.rules.debugger.trials import TensorUnavailable

    values = []
    for name, entry in sorted(tensors.items()):
        tensor = trial.tensor(name)
        if entry.get("raw") and math.prod(entry["shape"]) == 1:
            scalar = float(tensor.value(step, worker=worker).reshape(-1)[0])
            values.append(summary_pb2.Summary.Value(tag=name, simple_value=scalar))
        elif entry.get("raw") or entry.get("histogram"):
            try:
                values.append(_histogram(name, *tensor.histogram(step, worker=worker)))
            except TensorUnavailable:  # no finite value: nothing to draw
                pass
        for reduction, value in sorted(entry["reductions"].items()):
            values.append(summary_pb2.Summary.Value(tag=f"{name}/{reduction}", simple_value=float(value)))
    return values


def export(trial, out: str | Path) -> list[Path]:
    """Write `trial`'s tensors (a Trial, a job name, or a path/URI) under `out`; the event files written."""
    from shipyard.rules.debugger.trials import Trial
    from shipyard.rules.debugger.trials import trial as open_trial

    trial = trial if isinstance(trial, Trial) else open_trial(str(trial))
    runs = _Runs(Path(out))
    try:
        for step, worker, doc in trial.records():
            runs.write(doc["mode"], worker, doc["mode_step"], _values(trial, step, worker, doc["tensors"]))
    finally:
        runs.close()
    return runs.paths
