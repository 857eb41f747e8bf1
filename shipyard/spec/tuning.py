"""What a tuning job is: SageMaker's CreateHyperParameterTuningJob in snake_case (spec section C): the
ranges searched, the strategy, the objective, the limits and completion criteria, warm start, and the
training job every trial is made from. Validated when made, so a tuning job that exists can run: each
rule below is one of SageMaker's, refused before any trial starts with the field, the value and the fix."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Union

from pydantic import Field, model_validator

from shipyard.errors import ValidationError, unknown_name_error
from shipyard.registry import Registry
from shipyard.spec.build import UserModel
from shipyard.spec.job import MAX_HYPERPARAMETERS, JobSpec

# Each a module of shipyard/tuning/strategies/ that turns the spec into an Optuna sampler (and pruner).
STRATEGIES = Registry("tuning_strategies", "tuning strategy", {
    "Bayesian": "shipyard.tuning.strategies.bayesian",
    "Random": "shipyard.tuning.strategies.random",
    "Grid": "shipyard.tuning.strategies.grid",
    "Hyperband": "shipyard.tuning.strategies.hyperband",
})
SCALING_TYPES = ("Auto", "Linear", "Logarithmic", "ReverseLogarithmic")
MAX_TUNED = 30
MAX_CATEGORICAL_VALUES = 30
MAX_PARENTS = 5
MAX_DEFINITIONS = 10  # training job definitions in one tuning job
MAX_RESOURCE = 20_000
# Hyperband's max_resource, when not given, is the static hyperparameter of one of these names (C.3).
EPOCHS_NAMES = ("epochs", "numepochs", "n-epochs", "n_epochs", "num_epochs")
OBJECTIVE_HYPERPARAMETER = "_tuning_objective_metric"  # the service adds it; it counts towards the 100


def _scaling(name: str, value: str) -> str:
    if value not in SCALING_TYPES:
        raise unknown_name_error(f"hyperparameter_ranges[{name!r}].scaling_type", value, SCALING_TYPES)
    return value


class _NumericRange(UserModel):
    name: str
    scaling_type: str = "Auto"

    @model_validator(mode="after")
    def _valid(self):
        _check_bounds(self)
        self._check_scaling()
        return self


class ContinuousRange(_NumericRange):
    kind: Literal["continuous"] = "continuous"
    min_value: float
    max_value: float

    def _check_scaling(self) -> None:
        if self.scaling_type == "ReverseLogarithmic" and not (0 <= self.min_value and self.max_value < 1):
            raise ValidationError(f"hyperparameter_ranges[{self.name!r}]", (self.min_value, self.max_value),
                                  "ReverseLogarithmic needs 0 <= min_value <= max_value < 1")


class IntegerRange(_NumericRange):
    kind: Literal["integer"] = "integer"
    min_value: int
    max_value: int

    def _check_scaling(self) -> None:
        if self.scaling_type == "ReverseLogarithmic":
            raise ValidationError(f"hyperparameter_ranges[{self.name!r}].scaling_type", self.scaling_type,
                                  "ReverseLogarithmic is for continuous ranges only; use Linear or Logarithmic")


class CategoricalRange(UserModel):
    kind: Literal["categorical"] = "categorical"
    name: str
    values: tuple[str, ...] = Field(min_length=1, max_length=MAX_CATEGORICAL_VALUES)


Range = Annotated[Union[ContinuousRange, IntegerRange, CategoricalRange], Field(discriminator="kind")]


def _check_bounds(r: _NumericRange) -> None:
    field = f"hyperparameter_ranges[{r.name!r}]"
    _scaling(r.name, r.scaling_type)
    if not (math.isfinite(r.min_value) and math.isfinite(r.max_value)):
        raise ValidationError(field, (r.min_value, r.max_value), "min_value and max_value must be finite numbers")
    if r.min_value > r.max_value:
        raise ValidationError(field, (r.min_value, r.max_value), "min_value is greater than max_value; swap them")
    if r.scaling_type == "Logarithmic" and r.min_value <= 0:
        raise ValidationError(field, r.min_value, "a Logarithmic range needs min_value > 0; use Linear, or a "
                              "positive minimum")


class HyperbandConfig(UserModel):
    """HyperbandStrategyConfig: no trial is stopped before min_resource; one stops at max_resource."""

    min_resource: int | None = Field(default=None, ge=1)
    max_resource: int | None = Field(default=None, ge=1, le=MAX_RESOURCE)
    # Beyond SageMaker: a configuration promoted after it was paused at a rung continues from its
    # checkpoints in a new job; False retrains it from epoch 1 (as classic Hyperband).
    resume: bool = True


class CompletionCriteria(UserModel):
    """TuningJobCompletionCriteriaConfig: the tuning job completes when any one is met."""

    max_number_of_training_jobs_not_improving: int | None = Field(default=None, ge=3)
    complete_on_convergence: bool = False
    target_objective_metric_value: float | None = None


class WarmStart(UserModel):
    type: Literal["IdenticalDataAndAlgorithm", "TransferLearning"]
    parents: tuple[str, ...] = Field(min_length=1, max_length=MAX_PARENTS)


class TrainingDefinition(UserModel):
    """What trials train (SageMaker's HyperParameterTrainingJobDefinition): the training job every trial
    is made from (its hyperparameters are the static ones), the ranges tuned over it and the objective.
    A tuning job has one, or with HyperparameterTuner.create() one per named estimator."""

    name: str | None = None  # the estimator's name in create(estimator_dict=...)
    training: JobSpec
    hyperparameter_ranges: tuple[Range, ...] = Field(min_length=1)
    objective_metric_name: str
    # How the trials' scripts get the tuned values: as the estimator sends hyperparameters (hp.ENCODINGS).
    encoding: Literal["json", "str"] = "json"

    def _field(self, field: str) -> str:
        return field if self.name is None else f"{field}_dict[{self.name!r}]"

    def check(self) -> None:
        """Run by the tuning spec, so errors name the tuner's arguments, not where they sit in the spec."""
        names = [r.name for r in self.hyperparameter_ranges]
        field = self._field("hyperparameter_ranges")
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValidationError(field, repeated, "each hyperparameter may have one range")
        if len(names) > MAX_TUNED:
            raise ValidationError(field, len(names), f"at most {MAX_TUNED} hyperparameters can be tuned; make "
                                  "the others static")
        static = [k for k in self.training.hyperparameters if not k.startswith("sagemaker_")]
        both = sorted(set(static) & set(names))
        if both:
            raise ValidationError(field, both, "a hyperparameter is either static (the estimator's) or tuned (a "
                                  "range), not both; remove it from one")
        if len(static) + len(names) + 1 > MAX_HYPERPARAMETERS:
            raise ValidationError(field, len(static) + len(names), "static plus tuned hyperparameters (and "
                                  f"{OBJECTIVE_HYPERPARAMETER}) must be at most {MAX_HYPERPARAMETERS}")
        metrics = [m.name for m in self.training.all_metric_definitions]
        field = self._field("objective_metric_name")
        if self.objective_metric_name not in metrics:
            raise unknown_name_error(field, self.objective_metric_name, metrics) if metrics \
                else ValidationError(field, self.objective_metric_name, "no metric definition names it; add "
                                     "{'Name': ..., 'Regex': ...} to metric_definitions")


SINGLE = ("training", "hyperparameter_ranges", "objective_metric_name", "encoding")


class TuningSpec(UserModel):
    tuning_job_name: str
    # One, or one per named estimator; `training=`, `hyperparameter_ranges=`, ... given directly are the one.
    definitions: tuple[TrainingDefinition, ...] = Field(min_length=1, max_length=MAX_DEFINITIONS)
    objective_type: Literal["Maximize", "Minimize"] = "Maximize"
    strategy: str = "Bayesian"
    max_jobs: int | None = Field(default=None, ge=1)  # None: 1, or the grid's size
    max_parallel_jobs: int = Field(default=1, ge=1, le=100)
    max_runtime_in_seconds: int | None = Field(default=None, ge=120, le=15_768_000)
    # USD every trial together may cost: the tuning job completes before they would cost more (each
    # trial's own budget is at most what is left when it starts; docs/planner.md, Budgets).
    max_cost: float | None = Field(default=None, gt=0)
    early_stopping_type: Literal["Off", "Auto"] = "Off"
    hyperband: HyperbandConfig | None = None
    completion_criteria: CompletionCriteria | None = None
    warm_start: WarmStart | None = None
    random_seed: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_definition(cls, values: Any) -> Any:
        if isinstance(values, dict) and any(key in values for key in SINGLE):
            values = dict(values)
            values["definitions"] = [{key: values.pop(key) for key in SINGLE if key in values}]
        return values

    @model_validator(mode="after")
    def _valid(self) -> TuningSpec:
        if self.strategy not in STRATEGIES:
            raise unknown_name_error("strategy", self.strategy, STRATEGIES)
        for definition in self.definitions:
            definition.check()
        names = [d.name for d in self.definitions]
        if len(names) > 1 and (None in names or len(set(names)) != len(names)):
            raise ValidationError("estimator_dict", names, "each estimator needs a name of its own")
        if len(names) > 1 and self.strategy in ("Grid", "Hyperband"):
            raise ValidationError("strategy", self.strategy, "tuning several estimators at once works with "
                                  "Bayesian or Random; tune each estimator on its own for Grid or Hyperband")
        if self.max_jobs is not None and self.max_parallel_jobs > self.max_jobs:
            raise ValidationError("max_parallel_jobs", self.max_parallel_jobs,
                                  f"is more than max_jobs ({self.max_jobs}); lower it or raise max_jobs")
        if self.strategy == "Grid":
            self._check_grid()
        if self.strategy == "Hyperband":
            if self.early_stopping_type == "Auto":
                raise ValidationError("early_stopping_type", "Auto", "Hyperband stops trials itself; set "
                                      "early_stopping_type='Off'")
            self.max_resource()  # raises when it can be neither given nor inferred
        elif self.hyperband is not None:
            raise ValidationError("strategy_config", self.hyperband, f"is for the Hyperband strategy, not "
                                  f"{self.strategy}; remove it")
        return self

    def definition(self, name: str | None = None) -> TrainingDefinition:
        return next(d for d in self.definitions if d.name == name)

    @property
    def only(self) -> TrainingDefinition:
        """The one training definition (Grid and Hyperband have one; so does any tuner but create()'s)."""
        return self.definitions[0]

    def _check_grid(self) -> None:
        ranges = self.only.hyperparameter_ranges
        continuous = [r.name for r in ranges if not isinstance(r, CategoricalRange)]
        if continuous:
            raise ValidationError("hyperparameter_ranges", continuous, "Grid searches categorical ranges only; "
                                  "give these as CategoricalParameter values, or use another strategy")
        size = self.grid_size()
        if self.max_jobs is not None and self.max_jobs != size:
            raise ValidationError("max_jobs", self.max_jobs, f"Grid runs every combination: {size}; leave "
                                  "max_jobs out or set it to that")

    def grid_size(self) -> int:
        return math.prod(len(r.values) for r in self.only.hyperparameter_ranges if isinstance(r, CategoricalRange))

    def total_jobs(self) -> int:
        """MaxNumberOfTrainingJobs: given, the grid's size, or SageMaker's default of 1."""
        if self.max_jobs is not None:
            return self.max_jobs
        return self.grid_size() if self.strategy == "Grid" else 1

    def max_resource(self) -> int:
        """Hyperband's max_resource: given, or the static epochs-like hyperparameter (C.3)."""
        if self.hyperband is not None and self.hyperband.max_resource is not None:
            return self.hyperband.max_resource
        return self._epochs()

    def ends_at_max_resource(self) -> bool:
        """Whether every trial's script ends by itself by max_resource (its epochs hyperparameter), so
        none is stopped there: a stop racing a script's own end could cost it its model."""
        try:
            return self._epochs() <= self.max_resource()
        except ValidationError:
            return False

    def _epochs(self) -> int:
        for name in EPOCHS_NAMES:
            if name in self.only.training.hyperparameters:
                text = self.only.training.hyperparameters[name].strip('"')
                if text.isdigit() and 1 <= int(text) <= MAX_RESOURCE:
                    return int(text)
                raise ValidationError(f"hyperparameters[{name!r}]", text, "Hyperband takes max_resource from it: "
                                      f"it must be a whole number from 1 to {MAX_RESOURCE}")
        raise ValidationError("strategy_config", self.hyperband, "Hyperband needs max_resource: give "
                              "HyperbandStrategyConfig(max_resource=...), or a static hyperparameter named "
                              f"{' or '.join(EPOCHS_NAMES)}")

    def min_resource(self) -> int:
        return (self.hyperband.min_resource if self.hyperband and self.hyperband.min_resource else 1)
