"""What `shipyard tune` submits: a tuning.yaml, which is a job file (cli/jobfile.py: the estimator's
arguments, `inputs`, `framework`, and `job_name`, here the tuning job's) plus a `tuning:` mapping of
HyperparameterTuner's arguments, with SageMaker's names:

    tuning:
      objective_metric_name: loss
      objective_type: Minimize
      strategy: Hyperband
      max_jobs: 20
      max_parallel_jobs: 3
      hyperparameter_ranges:
        lr: {min_value: 0.0001, max_value: 0.1, scaling_type: Logarithmic}
        width: {type: Integer, min_value: 8, max_value: 64}
        optimizer: {values: [sgd, adam]}
      strategy_config: {min_resource: 1, max_resource: 9}

A range is Categorical when it has `values`, else Integer when both bounds are whole numbers (or
`type: Integer`), else Continuous."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict

from shipyard.cli import jobfile
from shipyard.errors import ValidationError, unknown_name_error


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RangeFile(_Frozen):
    type: Literal["Continuous", "Integer", "Categorical"] | None = None
    min_value: float | None = None
    max_value: float | None = None
    scaling_type: str = "Auto"
    values: list[Any] | None = None


class HyperbandFile(_Frozen):
    min_resource: int | None = None
    max_resource: int | None = None
    resume: bool = True


class CompletionFile(_Frozen):
    max_number_of_training_jobs_not_improving: int | None = None
    complete_on_convergence: bool | None = None
    target_objective_metric_value: float | None = None


class WarmStartFile(_Frozen):
    warm_start_type: str
    parents: list[str]


class TunerFile(_Frozen):
    objective_metric_name: str
    hyperparameter_ranges: dict[str, RangeFile]
    metric_definitions: list[dict[str, str]] | None = None
    strategy: str = "Bayesian"
    objective_type: str = "Maximize"
    max_jobs: int | None = None
    max_parallel_jobs: int = 1
    max_runtime_in_seconds: int | None = None
    max_cost: float | None = None
    early_stopping_type: str = "Off"
    random_seed: int | None = None
    base_tuning_job_name: str | None = None
    strategy_config: HyperbandFile | None = None
    completion_criteria_config: CompletionFile | None = None
    warm_start_config: WarmStartFile | None = None


def load(path: str | Path) -> tuple[jobfile.JobRequest, TunerFile]:
    path = Path(path)
    label = str(path)
    raw = jobfile.read(path)
    if not isinstance(raw, dict) or not isinstance(raw.get("tuning"), dict):
        raise ValidationError(f"{label}: tuning", raw.get("tuning") if isinstance(raw, dict) else raw,
                              "a tuning file is a job file with a `tuning:` mapping of the tuner's arguments "
                              "(objective_metric_name, hyperparameter_ranges, ...); see docs/tuning.md")
    raw = dict(raw)
    tuning = raw.pop("tuning")
    try:
        tuner = TunerFile.model_validate(tuning)
    except pydantic.ValidationError as exc:
        raise _translate(label, exc) from None
    return jobfile.from_mapping(raw, label, path.resolve().parent), tuner


def _translate(label: str, exc: pydantic.ValidationError) -> ValidationError:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in ("tuning", *error["loc"]))
    if error["type"] == "extra_forbidden":
        *_, key = error["loc"]
        model = {1: TunerFile}.get(len(error["loc"]), RangeFile if "hyperparameter_ranges" in where else None)
        if model is not None:
            return unknown_name_error(f"{label}: key in {where.rpartition('.')[0]}", str(key), model.model_fields)
    return ValidationError(f"{label}: {where}", error.get("input"), error["msg"].removeprefix("Value error, "))


def _parameter(name: str, item: RangeFile):
    from shipyard.tuner import CategoricalParameter, ContinuousParameter, IntegerParameter

    kind = item.type or ("Categorical" if item.values is not None else
                         "Integer" if all(v is not None and float(v).is_integer()
                                          for v in (item.min_value, item.max_value)) else "Continuous")
    if kind == "Categorical":
        if item.values is None:
            raise ValidationError(f"tuning.hyperparameter_ranges.{name}.values", None, "a Categorical range "
                                  "lists its values")
        return CategoricalParameter(item.values)
    if item.min_value is None or item.max_value is None:
        raise ValidationError(f"tuning.hyperparameter_ranges.{name}", item.model_dump(exclude_unset=True),
                              "give min_value and max_value, or values for a categorical range")
    if kind == "Integer":
        return IntegerParameter(int(item.min_value), int(item.max_value), item.scaling_type)
    return ContinuousParameter(item.min_value, item.max_value, item.scaling_type)


def make_tuner(request: jobfile.JobRequest, tuner: TunerFile):
    from shipyard.tuner import (HyperbandStrategyConfig, HyperparameterTuner, StrategyConfig,
                                TuningJobCompletionCriteriaConfig, WarmStartConfig)

    fields = tuner.model_dump(exclude={"hyperparameter_ranges", "strategy_config", "completion_criteria_config",
                                       "warm_start_config"})
    return HyperparameterTuner(
        jobfile.make_estimator(request),
        hyperparameter_ranges={name: _parameter(name, item) for name, item in tuner.hyperparameter_ranges.items()},
        strategy_config=StrategyConfig(HyperbandStrategyConfig(**tuner.strategy_config.model_dump()))
        if tuner.strategy_config else None,
        completion_criteria_config=TuningJobCompletionCriteriaConfig(**tuner.completion_criteria_config.model_dump())
        if tuner.completion_criteria_config else None,
        warm_start_config=WarmStartConfig(tuner.warm_start_config.warm_start_type, tuner.warm_start_config.parents)
        if tuner.warm_start_config else None,
        **fields)
