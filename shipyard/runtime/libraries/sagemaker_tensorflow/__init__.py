"""`from sagemaker_tensorflow import PipeModeDataset`, as SageMaker's TensorFlow containers offer it: a
tf.data.Dataset of the records of a Pipe-mode channel. The agent puts this directory on every training
process's PYTHONPATH, so scripts written for SageMaker run unchanged.

Written in Python over shipyard.runtime.pipe_reader rather than AWS's compiled op: every new iterator of
the dataset (a `for` loop over it, each pass of `.repeat()`) opens the next epoch's pipe, counted in
`state_dir` as the original counts it. The directories default to the job's own (/opt/ml/..., or the
instance's tree when it runs without a sandbox). `benchmark`, `benchmark_records_interval` and
`max_corrupted_records_to_skip` are accepted and have no effect."""

from __future__ import annotations

import json
from pathlib import Path

from shipyard.errors import ValidationError
from shipyard.runtime.pipe_reader import (default_config_dir, default_pipe_dir, default_state_dir, next_epoch,
                                          read_records)

RECORD_FORMATS = ("RecordIO", "TFRecord", "TextLine")


class PipeModeDatasetException(ValidationError):
    """A PipeModeDataset asked for a channel the job does not stream in Pipe mode (the original's name)."""


def PipeModeDataset(  # noqa: N802 (SageMaker's name)
    channel, record_format="RecordIO", state_dir=None, pipe_dir=None, config_dir=None, benchmark=False,
    benchmark_records_interval=0, max_corrupted_records_to_skip=0,
):
    """The records of Pipe-mode channel `channel`, a tf.data.Dataset of scalar tf.string."""
    if record_format not in RECORD_FORMATS:
        raise ValidationError("record_format", record_format, f"use one of {', '.join(RECORD_FORMATS)}")
    _check_channel(channel, Path(config_dir or default_config_dir()))
    pipes = Path(pipe_dir or default_pipe_dir())
    state = Path(state_dir or default_state_dir())
    import tensorflow as tf  # after the checks: a wrong channel is told without TensorFlow's 3 s import

    def records():
        yield from read_records(pipes / f"{channel}_{next_epoch(channel, state)}", record_format)

    return tf.data.Dataset.from_generator(records, output_signature=tf.TensorSpec(shape=(), dtype=tf.string))


def _check_channel(channel: str, config_dir: Path) -> None:
    config = json.loads((config_dir / "inputdataconfig.json").read_text())
    if channel not in config:
        raise PipeModeDatasetException("channel", channel, f"not in the job's inputdataconfig.json (channels: "
                                       f"{', '.join(config) or 'none'})")
    mode = config[channel].get("TrainingInputMode", "")
    if mode.lower() != "pipe":
        raise PipeModeDatasetException("channel", channel, f"its TrainingInputMode is {mode!r}; give the channel "
                                       "input_mode='Pipe' to read it with PipeModeDataset")
