"""SageMaker's HyperparameterTuner surface (sagemaker/tuner.py, parameter.py), its names, arguments and
defaults (spec C.1, C.2), building the frozen TuningSpec (spec/tuning.py) that every check runs on.
`plan()` shows the first trials' hyperparameters as their scripts would get them, without running any."""

from __future__ import annotations

from enum import Enum
from typing import Any

from shipyard.errors import ShipyardError, UnexpectedStatusError, ValidationError


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
        try:
            self.type = WarmStartTypes(warm_start_type)
        except ValueError:
            from shipyard.errors import unknown_name_error

            raise unknown_name_error("warm_start_type", warm_start_type, [t.value for t in WarmStartTypes]) from None
        self.parents = set(parents or ())


class HyperbandStrategyConfig:
    """`resume` is shipyard's: a promoted configuration continues from its checkpoints (False: it trains
    again from epoch 1, as classic Hyperband)."""

    def __init__(self, min_resource: int | None = None, max_resource: int | None = None, resume: bool = True) -> None:
        self.min_resource, self.max_resource, self.resume = min_resource, max_resource, resume


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


def _check_ranges(field: str, ranges: Any) -> dict[str, Any]:
    if not isinstance(ranges, dict) or not ranges:
        raise ValidationError(field, ranges, "give a dict of hyperparameter name to ContinuousParameter, "
                              "IntegerParameter or CategoricalParameter")
    for name, value in ranges.items():
        if not isinstance(value, (ContinuousParameter, CategoricalParameter)):
            raise ValidationError(f"{field}[{name!r}]", value, "give a ContinuousParameter, IntegerParameter or "
                                  "CategoricalParameter")
    return dict(ranges)


def _parameters(definition) -> dict[str, Any]:
    """A training definition's ranges as the SDK's parameter objects."""
    ranges = {}
    for r in definition.hyperparameter_ranges:
        if r.kind == "categorical":
            ranges[r.name] = CategoricalParameter(list(r.values))
        else:
            kind = ContinuousParameter if r.kind == "continuous" else IntegerParameter
            ranges[r.name] = kind(r.min_value, r.max_value, r.scaling_type)
    return ranges


class HyperparameterTuner:
    """One estimator (`estimator`, `objective_metric_name`, ...), or several from create() (the same
    names with `_dict`, keyed by estimator name; `estimator` is then None), as SageMaker's."""

    def __init__(self, estimator, objective_metric_name: str, hyperparameter_ranges: dict[str, Any],
                 metric_definitions: list[dict[str, str]] | None = None, strategy: str = "Bayesian",
                 objective_type: str = "Maximize", max_jobs: int | None = None, max_parallel_jobs: int = 1,
                 max_runtime_in_seconds: int | None = None, tags: list | None = None,
                 base_tuning_job_name: str | None = None, warm_start_config: WarmStartConfig | None = None,
                 strategy_config: StrategyConfig | None = None,
                 completion_criteria_config: TuningJobCompletionCriteriaConfig | None = None,
                 early_stopping_type: str = "Off", estimator_name: str | None = None,
                 random_seed: int | None = None, autotune: bool = False,
                 hyperparameters_to_keep_static: list[str] | None = None, max_cost: float | None = None) -> None:
        if autotune or hyperparameters_to_keep_static:
            raise ValidationError("autotune", autotune, "autotune is not supported by shipyard yet; give "
                                  "hyperparameter_ranges")
        self.estimator, self.objective_metric_name = estimator, objective_metric_name
        self._hyperparameter_ranges = None if estimator is None else _check_ranges("hyperparameter_ranges",
                                                                                   hyperparameter_ranges)
        self.metric_definitions = list(metric_definitions or [])
        self.estimator_dict = self.objective_metric_name_dict = self._hyperparameter_ranges_dict = None
        self.metric_definitions_dict: dict[str, list] = {}
        if estimator_name is not None:  # one named training definition, as create() with one estimator
            self.estimator_dict = {estimator_name: estimator}
            self.objective_metric_name_dict = {estimator_name: objective_metric_name}
            self._hyperparameter_ranges_dict = {estimator_name: self._hyperparameter_ranges}
            self.metric_definitions_dict = {estimator_name: self.metric_definitions}
            self.estimator = self.objective_metric_name = self._hyperparameter_ranges = None
            self.metric_definitions = []
        self.objective_type = objective_type
        self.strategy, self.max_jobs, self.max_parallel_jobs = strategy, max_jobs, max_parallel_jobs
        self.max_runtime_in_seconds, self.tags = max_runtime_in_seconds, list(tags or [])
        self.base_tuning_job_name = base_tuning_job_name
        self.warm_start_config, self.strategy_config = warm_start_config, strategy_config
        self.completion_criteria_config = completion_criteria_config
        self.early_stopping_type, self.random_seed = early_stopping_type, random_seed
        self.max_cost = max_cost   # shipyard's: USD all trials together may cost
        self.latest_tuning_job: TuningJob | None = None
        self._current_job_name: str | None = None

    @classmethod
    def create(cls, estimator_dict: dict[str, Any], objective_metric_name_dict: dict[str, str],
               hyperparameter_ranges_dict: dict[str, dict[str, Any]],
               metric_definitions_dict: dict[str, list] | None = None, base_tuning_job_name: str | None = None,
               strategy: str = "Bayesian", strategy_config: StrategyConfig | None = None,
               completion_criteria_config: TuningJobCompletionCriteriaConfig | None = None,
               objective_type: str = "Maximize", max_jobs: int | None = None, max_parallel_jobs: int = 1,
               max_runtime_in_seconds: int | None = None, tags: list | None = None,
               warm_start_config: WarmStartConfig | None = None, early_stopping_type: str = "Off",
               random_seed: int | None = None, autotune: bool = False,
               hyperparameters_to_keep_static_dict: dict | None = None,
               max_cost: float | None = None) -> HyperparameterTuner:
        """Tune several estimators in one tuning job: each trial trains one of them, chosen by the
        search with its hyperparameters; every dict is keyed by the estimator's name."""
        if not isinstance(estimator_dict, dict) or not estimator_dict:
            raise ValidationError("estimator_dict", estimator_dict, "give a dict of estimator name to estimator")
        metric_definitions_dict = metric_definitions_dict or {}
        for field, given in (("objective_metric_name_dict", objective_metric_name_dict),
                             ("hyperparameter_ranges_dict", hyperparameter_ranges_dict),
                             ("metric_definitions_dict", metric_definitions_dict)):
            unknown = sorted(set(given or {}) - set(estimator_dict))
            missing = sorted(set(estimator_dict) - set(given or {})) if field != "metric_definitions_dict" else []
            if unknown or missing:
                raise ValidationError(field, unknown or missing, f"keys must be estimator_dict's: "
                                      f"{', '.join(estimator_dict)}" + ("; add these" if missing else ""))
        tuner = cls(None, None, None, strategy=strategy, objective_type=objective_type, max_jobs=max_jobs,
                    max_parallel_jobs=max_parallel_jobs, max_runtime_in_seconds=max_runtime_in_seconds, tags=tags,
                    base_tuning_job_name=base_tuning_job_name, warm_start_config=warm_start_config,
                    strategy_config=strategy_config, completion_criteria_config=completion_criteria_config,
                    early_stopping_type=early_stopping_type, random_seed=random_seed, autotune=autotune,
                    hyperparameters_to_keep_static=hyperparameters_to_keep_static_dict, max_cost=max_cost)
        tuner.estimator_dict = dict(estimator_dict)
        tuner.objective_metric_name_dict = dict(objective_metric_name_dict)
        tuner._hyperparameter_ranges_dict = {name: _check_ranges(f"hyperparameter_ranges_dict[{name!r}]", ranges)
                                             for name, ranges in hyperparameter_ranges_dict.items()}
        tuner.metric_definitions_dict = {name: list(m) for name, m in metric_definitions_dict.items()}
        return tuner

    def hyperparameter_ranges(self) -> dict[str, Any] | None:
        return None if self._hyperparameter_ranges is None else dict(self._hyperparameter_ranges)

    def hyperparameter_ranges_dict(self) -> dict[str, dict[str, Any]] | None:
        return None if self._hyperparameter_ranges_dict is None else dict(self._hyperparameter_ranges_dict)

    def _entries(self) -> list[tuple[str | None, Any, str, dict, list]]:
        """(name, estimator, objective metric, ranges, metric definitions) of each training definition."""
        if self.estimator is not None:
            return [(None, self.estimator, self.objective_metric_name, self._hyperparameter_ranges,
                     self.metric_definitions)]
        return [(name, estimator, self.objective_metric_name_dict[name], self._hyperparameter_ranges_dict[name],
                 self.metric_definitions_dict.get(name, [])) for name, estimator in self.estimator_dict.items()]

    def _estimator(self, definition: str | None = None):
        return self.estimator if definition is None else self.estimator_dict[definition]

    def _tuning_job_name(self, name: str | None) -> str:
        from shipyard.spec.names import generate_job_name, validate_job_name

        if name:
            if len(name) > MAX_TUNING_JOB_NAME:
                raise ValidationError("job_name", name, f"a tuning job name is at most {MAX_TUNING_JOB_NAME} "
                                      "characters")
            return validate_job_name(name)
        first = self._entries()[0][1]
        base = (self.base_tuning_job_name or first.base_job_name or DEFAULT_BASE_TUNING_JOB_NAME)
        # generate_job_name appends -YYYY-MM-DD-HH-MM-SS-mmm (24 characters); SageMaker shortens the stamp
        # to keep within 32: the base is cut to fit.
        return generate_job_name(base[:MAX_TUNING_JOB_NAME - 24].rstrip("-") or DEFAULT_BASE_TUNING_JOB_NAME)[
            :MAX_TUNING_JOB_NAME].rstrip("-")

    def _definition(self, entry, inputs: Any, job_name: str) -> dict:
        """A training definition: made as a job named `job_name`, so its code is uploaded under it."""
        from shipyard.spec.build import build
        from shipyard.spec.job import JobSpec

        name, estimator, objective, ranges, metrics = entry
        training = estimator._spec(inputs, job_name, estimator._store())
        if metrics:  # the tuner's definitions, over the estimator's of the same name
            ours = {m["Name"] if isinstance(m, dict) else m for m in metrics}
            kept = [m.model_dump(by_alias=True) for m in training.metric_definitions if m.name not in ours]
            training = build(JobSpec, "metric_definitions", **{
                **training.model_dump(), "metric_definitions": [*kept, *metrics]})
        return {"name": name, "training": training, "objective_metric_name": objective,
                "hyperparameter_ranges": [r._range(n) for n, r in ranges.items()], "encoding": estimator._encoding()}

    def _spec(self, inputs: Any = None, job_name: str | None = None):
        from shipyard.spec.build import build
        from shipyard.spec.tuning import TuningSpec

        name = self._tuning_job_name(job_name)
        entries = self._entries()
        if len(entries) == 1:
            definitions = [self._definition(entries[0], inputs, name)]
        else:  # fit(inputs) takes each estimator's inputs by its name
            if inputs is not None and not (isinstance(inputs, dict) and set(inputs) <= set(self.estimator_dict)):
                raise ValidationError("inputs", inputs, "with several estimators, give a dict of estimator name "
                                      "to that estimator's inputs")
            definitions = [self._definition(entry, (inputs or {}).get(entry[0]), f"{name}-{index}")
                           for index, entry in enumerate(entries, 1)]
        hyperband = self.strategy_config.hyperband_strategy_config if self.strategy_config else None
        criteria = self.completion_criteria_config
        if self.max_cost is not None:
            _check_budget(self.max_cost, [d["training"] for d in definitions])
        return build(
            TuningSpec, "", tuning_job_name=name, definitions=definitions, objective_type=self.objective_type,
            strategy=self.strategy, max_jobs=self.max_jobs, max_parallel_jobs=self.max_parallel_jobs,
            max_runtime_in_seconds=self.max_runtime_in_seconds, early_stopping_type=self.early_stopping_type,
            hyperband=vars(hyperband) if hyperband else None,
            completion_criteria=None if criteria is None else {
                k: v for k, v in vars(criteria).items() if v is not None},
            warm_start=None if self.warm_start_config is None else {
                "type": self.warm_start_config.type.value, "parents": sorted(self.warm_start_config.parents)},
            random_seed=self.random_seed, max_cost=self.max_cost,
        )

    def plan(self, inputs: Any = None, trials: int = 3, job_name: str | None = None) -> list[dict[str, str]]:
        """The hyperparameters of the first `trials` trials (of max_jobs at most), encoded as each trial's
        script gets them, tuned and static; nothing runs or is written. With several estimators, each
        says which one it trains under `training_definition`."""
        from shipyard.tuning import trials as trial
        from shipyard.tuning.search import DEFINITION, Search

        spec = self._spec(inputs, job_name)
        search = Search(spec)
        planned = []
        for proposal in (search.ask() for _ in range(min(trials, spec.total_jobs()))):
            encoded = trial.hyperparameters(spec.definition(proposal.definition), proposal.hyperparameters)
            planned.append(encoded if proposal.definition is None else {DEFINITION: proposal.definition, **encoded})
        return planned

    # -- running -------------------------------------------------------------------------------
    def fit(self, inputs: Any = None, job_name: str | None = None, include_cls_metadata: bool = False,
            estimator_kwargs: dict | None = None, wait: bool = True, **kwargs: Any) -> None:
        """Start the tuning job: every check first, the code uploaded once, then a detached tuning
        process that runs the trials (the client may exit); with wait, block until it ends."""
        from shipyard.tuning import lifecycle

        spec = self._spec(inputs, job_name)
        store = self._entries()[0][1]._store()
        lifecycle.submit(store, spec, {name: estimator._pack for name, estimator, *_ in self._entries()})
        self._current_job_name = spec.tuning_job_name
        self.latest_tuning_job = TuningJob(spec.tuning_job_name, store)
        if wait:
            self.wait()

    def _require(self) -> TuningJob:
        if self.latest_tuning_job is None:
            raise ValidationError("latest_tuning_job", None, "no tuning job yet: call fit() or attach() first")
        return self.latest_tuning_job

    def wait(self) -> dict:
        """Block until the tuning job ends; one that Failed raises, as SageMaker's SDK does."""
        job = self._require()
        description = job.wait()
        if description["HyperParameterTuningJobStatus"] == "Failed":
            raise UnexpectedStatusError(job.name, "Failed", description.get("FailureReason"))
        return description

    def stop_tuning_job(self) -> None:
        self._require().stop()

    stop = stop_tuning_job

    def describe(self) -> dict:
        return self._require().describe()

    def best_training_job(self) -> str:
        """The name of the best trial so far (SageMaker's BestTrainingJob)."""
        best = self.describe().get("BestTrainingJob")
        if best is None:
            raise ShipyardError(f"Best training job not available for tuning job: {self._require().name}")
        return best["TrainingJobName"]

    def best_estimator(self, best_training_job: str | None = None):
        """The estimator of the best trial, attached to its job (its model_data is the best model)."""
        job = best_training_job or self.best_training_job()
        tuning = self._require().tuning
        definition = next((t.definition for t in tuning.trials(self._require().name) if t.job == job), None)
        return type(self._estimator(definition)).attach(job)

    def analytics(self) -> HyperparameterTuningJobAnalytics:
        return HyperparameterTuningJobAnalytics(self._require().name)

    @classmethod
    def attach(cls, tuning_job_name: str, sagemaker_session: Any = None, job_details: dict | None = None,
               estimator_cls: Any = None) -> HyperparameterTuner:
        """Rebuild the tuner of an existing tuning job (from any process), with its estimators."""
        from shipyard.cli.jobfile import FRAMEWORKS
        from shipyard.store import Store
        from shipyard.store.tuning import TuningStore

        store = Store()
        spec = TuningStore(store).get(tuning_job_name).spec
        estimators = {d.name: (estimator_cls or FRAMEWORKS.load(d.training.framework or "none"))._from_spec(d.training)
                      for d in spec.definitions}
        hyperband = spec.hyperband
        criteria = spec.completion_criteria
        settings = dict(
            strategy=spec.strategy, objective_type=spec.objective_type, max_jobs=spec.max_jobs,
            max_parallel_jobs=spec.max_parallel_jobs, max_runtime_in_seconds=spec.max_runtime_in_seconds,
            warm_start_config=None if spec.warm_start is None else WarmStartConfig(
                spec.warm_start.type, spec.warm_start.parents),
            strategy_config=None if hyperband is None else StrategyConfig(HyperbandStrategyConfig(
                **hyperband.model_dump())),
            completion_criteria_config=None if criteria is None else TuningJobCompletionCriteriaConfig(
                criteria.max_number_of_training_jobs_not_improving, criteria.complete_on_convergence or None,
                criteria.target_objective_metric_value),
            early_stopping_type=spec.early_stopping_type, random_seed=spec.random_seed)
        if None in estimators:
            tuner = cls(estimators[None], spec.only.objective_metric_name, _parameters(spec.only), **settings)
        else:
            tuner = cls.create(estimators, {d.name: d.objective_metric_name for d in spec.definitions},
                               {d.name: _parameters(d) for d in spec.definitions}, **settings)
        tuner._current_job_name = tuning_job_name
        tuner.latest_tuning_job = TuningJob(tuning_job_name, store)
        return tuner

    # -- warm start ----------------------------------------------------------------------------
    def identical_dataset_and_algorithm_tuner(self, additional_parents: set[str] | None = None):
        """A new tuner warm-started from this tuning job (and `additional_parents`) on the same data."""
        return self._warm_started(WarmStartTypes.IDENTICAL_DATA_AND_ALGORITHM, additional_parents, self.estimator)

    def transfer_learning_tuner(self, additional_parents: set[str] | None = None, estimator=None):
        """A new tuner warm-started from this tuning job (and `additional_parents`), for other data or
        another estimator."""
        return self._warm_started(WarmStartTypes.TRANSFER_LEARNING, additional_parents, estimator or self.estimator)

    def _warm_started(self, kind: WarmStartTypes, additional: set[str] | None, estimator) -> HyperparameterTuner:
        import copy

        tuner = copy.copy(self)
        tuner.estimator = estimator
        tuner.warm_start_config = WarmStartConfig(kind, {self._require().name, *(additional or ())})
        tuner.latest_tuning_job, tuner._current_job_name = None, None
        return tuner


class TuningJob:
    """A submitted tuning job, as SageMaker's `_TuningJob`: describe, stop, wait."""

    def __init__(self, name: str, store=None) -> None:
        from shipyard.store import Store
        from shipyard.store.tuning import TuningStore

        self.name = name
        self.tuning = TuningStore(store or Store())

    def describe(self) -> dict:
        from shipyard.tuning.describe import describe

        return describe(self.tuning.store, self.name)

    def stop(self) -> None:
        from shipyard.tuning.lifecycle import stop

        stop(self.tuning, self.name)

    def wait(self, poll: float = 1.0) -> dict:
        """Block until the tuning job ends, printing each change of its counters."""
        import time

        shown = None
        while True:
            description = self.describe()
            counters = description["TrainingJobStatusCounters"]
            seen = (description["HyperParameterTuningJobStatus"], tuple(counters.values()))
            if seen != shown:
                shown = seen
                best = description.get("BestTrainingJob")
                print(f"{self.name}: {seen[0]}, " + ", ".join(f"{k} {v}" for k, v in counters.items() if v)
                      + (f"; best {best['FinalHyperParameterTuningJobObjectiveMetric']['Value']:.6g} "
                         f"({best['TrainingJobName']})" if best else ""), flush=True)
            if description["HyperParameterTuningJobStatus"] in ("Completed", "Failed", "Stopped"):
                return description
            time.sleep(poll)


class HyperparameterTuningJobAnalytics:
    """SageMaker's analytics of a tuning job: dataframe() has a row per training job."""

    def __init__(self, hyperparameter_tuning_job_name: str, sagemaker_session: Any = None) -> None:
        from shipyard.store import Store

        self.name, self._store, self._dataframe = hyperparameter_tuning_job_name, Store(), None

    def dataframe(self, force_refresh: bool = False):
        import pandas as pd

        from shipyard.tuning.describe import analytics_rows

        if self._dataframe is None or force_refresh:
            self._dataframe = pd.DataFrame(analytics_rows(self._store, self.name))
        return self._dataframe

    def export_csv(self, filename: str) -> None:
        self.dataframe().to_csv(filename)

    def description(self, force_refresh: bool = False) -> dict:
        from shipyard.tuning.describe import describe

        return describe(self._store, self.name)

    @property
    def tuning_ranges(self) -> dict:
        return self.description()["HyperParameterTuningJobConfig"]["ParameterRanges"]


def _check_budget(max_cost: Any, trainings: list) -> None:
    """A tuning budget on trials whose instances have no price would never bind."""
    from shipyard.control.billing import prices, rate

    if isinstance(max_cost, bool) or not isinstance(max_cost, (int, float)) or not max_cost > 0:
        raise ValidationError("max_cost", max_cost, "must be a positive number of USD")
    priced = prices()
    if not any(rate(training, priced) > 0 for training in trainings):
        types = ", ".join(sorted({g["instance_type"] for t in trainings for g in t.groups}))
        raise ValidationError("max_cost", max_cost, f"the trials' {types} has no price in the catalog, so a "
                              "budget would never stop the tuning job; give its price in "
                              "$SHIPYARD_HOME/instance_types.yaml (docs/planner.md) or leave max_cost out")
