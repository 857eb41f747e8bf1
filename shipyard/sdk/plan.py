"""`shipyard.plan(...)`: the planner (shipyard/planner/) with what a user writes: durations and sizes
as text, and optionally the estimator (and fit()'s inputs) of the job being planned, which give the
baseline's instance type, whether interruptions lose only the work since a checkpoint, and the
dataset's size (its channels, listed)."""

from __future__ import annotations

from typing import Any

from shipyard.errors import ValidationError
from shipyard.planner import models
from shipyard.planner.plan import Plan
from shipyard.planner.plan import plan as search
from shipyard.planner.request import PlanRequest, count, hours, size_bytes
from shipyard.planner.request import baseline as parse_baseline


def plan(deadline: str | float, baseline: str | None = None, budget: float | None = None,
         parameters: str | float | None = None, model_size: str | float | None = None,
         dataset_size: str | float | None = None, hard_deadline: bool = False, interruptions_ok: bool = True,
         step_time: str | float | None = None, activation_size: str | float | None = None,
         max_instances: int = 64, dtype: str = "bf16", optimizer: str = "adam", estimator: Any = None,
         inputs: Any = None, calibrate: bool = False, steps: float | None = None) -> Plan:
    """Options for meeting `deadline` ("8h") within `budget` (USD), best first, and why the first is.
    `baseline` is what was measured: "24h@ml.p3.2xlarge" (one instance of that type trains it in 24 h),
    or "24h" on the estimator's instance type. `parameters` ("70e9", "7B") or `model_size` ("10GB", its
    weights at `dtype`) sizes the model's state; `step_time` ("1.2s") is a step on the baseline.
    `calibrate=True` measures instead: a few steps of the estimator's job on 1 and 2 instances of its
    type (sdk/calibrate.py), with `steps` the whole training's optimizer steps on one instance."""
    if parameters is not None and model_size is not None:
        raise ValidationError("model_size", model_size, "give either parameters or model_size, not both")
    if model_size is not None:
        parameters = size_bytes("model_size", model_size) / models.WEIGHT_BYTES.get(dtype, 2)
    elif parameters is not None:
        parameters = count("parameters", parameters)
    fields: dict[str, Any] = {
        "deadline_hours": hours("deadline", deadline), "budget": budget, "hard_deadline": hard_deadline,
        "interruptions_ok": interruptions_ok, "max_instances": max_instances, "dtype": dtype,
        "optimizer": optimizer}
    if step_time is not None:
        fields["step_seconds"] = hours("step_time", step_time if isinstance(step_time, str) else f"{step_time}s") * 3600
    if activation_size is not None:
        fields["activation_bytes"] = size_bytes("activation_size", activation_size)
    if dataset_size is not None:
        fields["dataset_bytes"] = size_bytes("dataset_size", dataset_size)
    elif inputs:
        fields["dataset_bytes"] = channels_size(inputs) or None
    if estimator is not None and not getattr(estimator, "checkpoint_s3_uri", None):
        fields["checkpoint_minutes"] = None   # an interruption starts it over
    if calibrate:   # last: everything else is checked before the calibration's jobs run
        baseline = _calibrated(estimator, inputs, steps, fields)
    if baseline is None:
        raise ValidationError("baseline", ..., "say what one instance takes for the whole training, e.g. "
                              "baseline='24h@ml.p3.2xlarge' (--baseline 24h@ml.p3.2xlarge), or calibrate on the "
                              "job (--calibrate)")
    baseline_hours, instance_type = parse_baseline(baseline)
    if instance_type is None:
        instance_type = getattr(estimator, "instance_type", None)
        if instance_type in (None, "local", "local_gpu"):
            raise ValidationError("baseline", baseline, "name the instance type it was measured on, e.g. "
                                  f"{baseline}@ml.p3.2xlarge")
    fields.update(baseline_hours=baseline_hours, baseline_instance_type=instance_type)
    if parameters is not None:   # given: over what a calibration measured
        fields["parameters"] = parameters
    return search(PlanRequest(**fields))


def _calibrated(estimator: Any, inputs: Any, steps: float | None, fields: dict) -> str:
    """Calibrate on the estimator's job; the baseline it gives ("<hours>h@<its type>")."""
    from shipyard.sdk.calibrate import calibrate

    if estimator is None:
        raise ValidationError("calibrate", True, "calibrates a job: give its job file (shipyard plan JOB.yaml "
                              "--calibrate) or estimator=")
    if steps is None:
        raise ValidationError("steps", ..., "with calibrate, say how many optimizer steps the whole training "
                              "takes on one instance (--steps 5000): the calibration runs only a few")
    steps = count("steps", steps)
    calibration = calibrate(estimator, inputs)
    one = calibration.at(1)
    fields.update(calibration=calibration.to_dict(), steps=steps, step_seconds=one.step_seconds)
    if one.parameters:   # measured: what --parameters and --activation-size would say, unless given
        fields["parameters"] = one.parameters
        fields.setdefault("activation_bytes", one.activation_bytes)
    return f"{steps * one.step_seconds}s@{calibration.instance_type}"


def channels_size(inputs: Any) -> int:
    """The bytes under fit()'s inputs (a URI, or channel name -> URI / TrainingInput / FileSystemInput)."""
    from shipyard.errors import StorageError
    from shipyard.storage.transfer import listing

    channels = inputs if isinstance(inputs, dict) else {"training": inputs}
    total = 0
    for name, channel in channels.items():
        uri = getattr(channel, "s3_data", None) or getattr(channel, "directory_path", None) or channel
        try:
            total += sum(size for size, _ in listing(str(uri))[3].values())
        except StorageError as exc:
            raise ValidationError(f"inputs[{name!r}]", str(uri), f"cannot be listed to size the dataset: {exc}; "
                                  "give the size instead (dataset_size='10TB', --dataset-size 10TB)") from None
    return total
