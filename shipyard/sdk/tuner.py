"""SageMaker's HyperparameterTuner surface (sagemaker/tuner.py, parameter.py), its names, arguments and
defaults (spec C.1, C.2), building the frozen TuningSpec (spec/tuning.py) that every check runs on.
`plan()` shows the first trials' hyperparameters as their scripts would get them, without running any."""

from __future__ import annotations

from enum import Enum
from typing import Any

from shipyard.errors import ValidationError


class ContinuousParameter:
    def __init__(self, min_value: float, max_value: float, scaling_type: str = "Auto") -> None:
        self.min_value, self.max_value, self.scaling_type = min_value, max_value, scaling_type

    def _range(self, name: str) -> dict:
        return {"kind": "continuous", "name": name, "min_value": self.min_value, "max_value": self.max_value,
                "scaling_type": self.scaling_type}


class IntegerParameter(ContinuousParameter):
    def _range(self, name: str) -> dict:
        return {**super()._range(name), "kind": "integer"}


class CategoricalParameter:
    def __init__(self, values: Any) -> None:
        # SageMaker turns each value into a string; a single value is a one-value list.
        self.values = [str(v) for v in values] if isinstance(values, (list, tuple, set)) else [str(values)]

    def _range(self, name: str) -> dict:
        return {"kind": "categorical", "name": name, "values": self.values}


class WarmStartTypes(Enum):
    IDENTICAL_DATA_AND_ALGORITHM = "IdenticalDataAndAlgorithm"
    TRANSFER_LEARNING = "TransferLearning"


class WarmStartConfig:
    def __init__(self, warm_start_type: WarmStartTypes | str, parents: Any = None) -> None:
        self.type = WarmStartTypes(warm_start_type)
        self.parents = set(parents or ())


class HyperbandStrategyConfig:
    def __init__(self, min_resource: int | None = None, max_resource: int | None = None) -> None:
        self.min_resource, self.max_resource = min_resource, max_resource


class StrategyConfig:
    def __init__(self, hyperband_strategy_config: HyperbandStrategyConfig | None = None) -> None:
        self.hyperband_strategy_config = hyperband_strategy_config


class TuningJobCompletionCriteriaConfig:
    def __init__(self, max_number_of_training_jobs_not_improving: int | None = None,
                 complete_on_convergence: bool | None = None,
                 target_objective_metric_value: float | None = None) -> None:
        self.max_number_of_training_jobs_not_improving = max_number_of_training_jobs_not_improving
        self.complete_on_convergence = complete_on_convergence
        self.target_objective_metric_value = target_objective_metric_value


DEFAULT_BASE_TUNING_JOB_NAME = "tuning"
MAX_TUNING_JOB_NAME = 32  # SageMaker's limit for tuning job names


class HyperparameterTuner:
    def __init__(self, estimator, objective_metric_name: str, hyperparameter_ranges: dict[str, Any],
                 metric_definitions: list[dict[str, str]] | None = None, strategy: str = "Bayesian",
                 objective_type: str = "Maximize", max_jobs: int | None = None, max_parallel_jobs: int = 1,
                 max_runtime_in_seconds: int | None = None, tags: list | None = None,
                 base_tuning_job_name: str | None = None, warm_start_config: WarmStartConfig | None = None,
                 strategy_config: StrategyConfig | None = None,
                 completion_criteria_config: TuningJobCompletionCriteriaConfig | None = None,
                 early_stopping_type: str = "Off", estimator_name: str | None = None,
                 random_seed: int | None = None, autotune: bool = False,
                 hyperparameters_to_keep_static: list[str] | None = None) -> None:
        if autotune or hyperparameters_to_keep_static:
            raise ValidationError("autotune", autotune, "autotune is not supported by shipyard yet; give "
                                  "hyperparameter_ranges")
        if estimator_name is not None:
            raise ValidationError("estimator_name", estimator_name, "multi-estimator tuning is "
                                  "HyperparameterTuner.create(estimator_dict=...), not built yet")
        if not isinstance(hyperparameter_ranges, dict) or not hyperparameter_ranges:
            raise ValidationError("hyperparameter_ranges", hyperparameter_ranges, "give a dict of hyperparameter "
                                  "name to ContinuousParameter, IntegerParameter or CategoricalParameter")
        for name, value in hyperparameter_ranges.items():
            if not isinstance(value, (ContinuousParameter, CategoricalParameter)):
                raise ValidationError(f"hyperparameter_ranges[{name!r}]", value, "give a ContinuousParameter, "
                                      "IntegerParameter or CategoricalParameter")
        self.estimator = estimator
        self.objective_metric_name, self.objective_type = objective_metric_name, objective_type
        self._hyperparameter_ranges = dict(hyperparameter_ranges)
        self.metric_definitions = list(metric_definitions or [])
        self.strategy, self.max_jobs, self.max_parallel_jobs = strategy, max_jobs, max_parallel_jobs
        self.max_runtime_in_seconds, self.tags = max_runtime_in_seconds, list(tags or [])
        self.base_tuning_job_name = base_tuning_job_name
        self.warm_start_config, self.strategy_config = warm_start_config, strategy_config
        self.completion_criteria_config = completion_criteria_config
        self.early_stopping_type, self.random_seed = early_stopping_type, random_seed

    def hyperparameter_ranges(self) -> dict[str, Any]:
        return dict(self._hyperparameter_ranges)

    def _tuning_job_name(self, name: str | None) -> str:
        from shipyard.spec.names import generate_job_name, validate_job_name

        if name:
            if len(name) > MAX_TUNING_JOB_NAME:
                raise ValidationError("job_name", name, f"a tuning job name is at most {MAX_TUNING_JOB_NAME} "
                                      "characters")
            return validate_job_name(name)
        base = (self.base_tuning_job_name or self.estimator.base_job_name or DEFAULT_BASE_TUNING_JOB_NAME)
        # generate_job_name appends -YYYY-MM-DD-HH-MM-SS-mmm (24 characters); SageMaker shortens the stamp
        # to keep within 32: the base is cut to fit.
        return generate_job_name(base[:MAX_TUNING_JOB_NAME - 24].rstrip("-") or DEFAULT_BASE_TUNING_JOB_NAME)[
            :MAX_TUNING_JOB_NAME].rstrip("-")

    def _spec(self, inputs: Any = None, job_name: str | None = None):
        from shipyard.spec.build import build
        from shipyard.spec.job import JobSpec
        from shipyard.spec.tuning import TuningSpec

        name = self._tuning_job_name(job_name)
        training, _ = self.estimator._spec(inputs, f"{name}-000", self.estimator._store())
        if self.metric_definitions:  # the tuner's definitions, over the estimator's of the same name
            ours = {m["Name"] if isinstance(m, dict) else m for m in self.metric_definitions}
            kept = [m.model_dump(by_alias=True) for m in training.metric_definitions if m.name not in ours]
            training = build(JobSpec, "metric_definitions", **{
                **training.model_dump(), "metric_definitions": [*kept, *self.metric_definitions]})
        hyperband = self.strategy_config.hyperband_strategy_config if self.strategy_config else None
        criteria = self.completion_criteria_config
        return build(
            TuningSpec, "", tuning_job_name=name, training=training,
            hyperparameter_ranges=[r._range(n) for n, r in self._hyperparameter_ranges.items()],
            objective_metric_name=self.objective_metric_name, objective_type=self.objective_type,
            strategy=self.strategy, max_jobs=self.max_jobs, max_parallel_jobs=self.max_parallel_jobs,
            max_runtime_in_seconds=self.max_runtime_in_seconds, early_stopping_type=self.early_stopping_type,
            hyperband=vars(hyperband) if hyperband else None,
            completion_criteria=None if criteria is None else {
                k: v for k, v in vars(criteria).items() if v is not None},
            warm_start=None if self.warm_start_config is None else {
                "type": self.warm_start_config.type.value, "parents": sorted(self.warm_start_config.parents)},
            random_seed=self.random_seed,
        )

    def plan(self, inputs: Any = None, trials: int = 3, job_name: str | None = None) -> list[dict[str, str]]:
        """The hyperparameters of the first `trials` trials (of max_jobs at most), encoded as each trial's
        script gets them, tuned and static; nothing runs or is written."""
        from shipyard.tuning.search import Search

        spec = self._spec(inputs, job_name)
        search = Search(spec)
        static = {k: v for k, v in spec.training.hyperparameters.items() if not k.startswith("sagemaker_")}
        return [{**static, **self.estimator._encode(search.ask().hyperparameters)}
                for _ in range(min(trials, spec.total_jobs()))]
