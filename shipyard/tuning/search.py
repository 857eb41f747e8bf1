"""One tuning job's search over its ranges: an Optuna study asked for the next trial's hyperparameters
and told each trial's outcome. With a path, the study lives in SQLite there, so a tuning process that is
killed and started again continues the same search (trial numbers, what the sampler learnt).

Scaling types map onto Optuna's distributions: Linear (and Auto, which SageMaker starts as linear) is
uniform, Logarithmic is uniform in log space, and ReverseLogarithmic (continuous, inside [0, 1)) samples
1 - x in log space, which puts most values near 1."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.spec.tuning import STRATEGIES, CategoricalRange, ContinuousRange, TuningSpec


DEFINITION = "training_definition"


@dataclass(frozen=True)
class Proposal:
    number: int  # the trial's number in the study, from 0
    hyperparameters: dict[str, Any]  # name -> float, int or the categorical's string
    definition: str | None = None  # which training definition it trains (create()'s estimator name)


def _distribution(r):
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(r, CategoricalRange):
        return CategoricalDistribution(list(r.values))
    log = r.scaling_type == "Logarithmic"
    if isinstance(r, ContinuousRange):
        if r.scaling_type == "ReverseLogarithmic":
            return FloatDistribution(1 - r.max_value, 1 - r.min_value, log=True)
        return FloatDistribution(r.min_value, r.max_value, log=log)
    return IntDistribution(r.min_value, r.max_value, log=log)


def _fits(distribution, value: Any) -> bool:
    from optuna.distributions import CategoricalDistribution

    if isinstance(distribution, CategoricalDistribution):
        return value in distribution.choices
    return isinstance(value, (int, float)) and distribution.low <= value <= distribution.high


def _suggest(trial, key: str, distribution) -> Any:
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(key, distribution.choices)
    suggest = trial.suggest_int if isinstance(distribution, IntDistribution) else trial.suggest_float
    return suggest(key, distribution.low, distribution.high, log=distribution.log)


class Search:
    """With several training definitions (create()'s estimators), each trial first draws which one it
    trains (the `training_definition` parameter), then that definition's ranges, named
    `DEFINITION:NAME` in the study: conditional parameters, which TPE models per group."""

    def __init__(self, spec: TuningSpec, path: Path | None = None) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.spec = spec
        self.multiple = len(spec.definitions) > 1
        self.distributions = {d.name: {self._key(d.name, r.name): _distribution(r) for r in d.hyperparameter_ranges}
                              for d in spec.definitions}
        self._reversed = {self._key(d.name, r.name) for d in spec.definitions for r in d.hyperparameter_ranges
                          if isinstance(r, ContinuousRange) and r.scaling_type == "ReverseLogarithmic"}
        storage = optuna.storages.RDBStorage(f"sqlite:///{path}") if path is not None else None
        self.study = optuna.create_study(
            study_name=spec.tuning_job_name, storage=storage, load_if_exists=True,
            direction="minimize" if spec.objective_type == "Minimize" else "maximize",
            sampler=STRATEGIES.load(spec.strategy).sampler(spec),
        )

    def _key(self, definition: str | None, name: str) -> str:
        return f"{definition}:{name}" if self.multiple else name

    def _proposal(self, number: int, params: dict[str, Any]) -> Proposal:
        definition = params.get(DEFINITION)
        prefix = len(self._key(definition, ""))
        return Proposal(number, {key[prefix:]: 1 - value if key in self._reversed else value
                                 for key, value in params.items() if key != DEFINITION}, definition)

    def ask(self) -> Proposal:
        if not self.multiple:
            trial = self.study.ask(self.distributions[None])
        else:
            trial = self.study.ask()
            definition = trial.suggest_categorical(DEFINITION, [d.name for d in self.spec.definitions])
            for key, distribution in self.distributions[definition].items():
                _suggest(trial, key, distribution)
        return self._proposal(trial.number, trial.params)

    def unclaimed(self, claimed: set[int]) -> list[Proposal]:
        """Trials asked for but not in `claimed`: a process that died between asking and recording."""
        from optuna.trial import TrialState

        return [self._proposal(t.number, t.params) for t in self.study.get_trials(
            deepcopy=False, states=(TrialState.RUNNING,)) if t.number not in claimed]

    def finished(self, number: int) -> bool:
        from optuna.trial import TrialState

        return self.study.get_trials(deepcopy=False)[number].state != TrialState.RUNNING

    def tell(self, number: int, value: float | None) -> None:
        """A configuration's outcome: its final objective, or None when it emitted none (failed)."""
        from optuna.trial import TrialState

        self.study.tell(number, value, state=TrialState.FAIL if value is None else TrialState.COMPLETE)

    def seed(self, key: str, definition: str | None, values: dict[str, Any], objective: float) -> bool:
        """Add a finished trial of another tuning job (warm start), once per `key`; values outside this
        search's ranges are left out (TransferLearning may change them). False when none fits."""
        import optuna
        from optuna.distributions import CategoricalDistribution

        if any(t.user_attrs.get("parent_job") == key for t in self.study.get_trials(deepcopy=False)):
            return True
        if definition not in self.distributions:
            return False
        params, distributions = {}, {}
        for name, value in values.items():
            name = self._key(definition, name)
            distribution = self.distributions[definition].get(name)
            raw = 1 - value if name in self._reversed else value
            if distribution is not None and _fits(distribution, raw):
                params[name], distributions[name] = raw, distribution
        if not params:
            return False
        if self.multiple:
            params[DEFINITION] = definition
            distributions[DEFINITION] = CategoricalDistribution([d.name for d in self.spec.definitions])
        self.study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=objective,
                                                       user_attrs={"parent_job": key}))
        return True
