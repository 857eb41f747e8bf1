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

STATES = ("complete", "pruned", "fail")


@dataclass(frozen=True)
class Proposal:
    number: int  # the trial's number in the study, from 0
    hyperparameters: dict[str, Any]  # name -> float, int or the categorical's string


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


class Search:
    def __init__(self, spec: TuningSpec, path: Path | None = None) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        strategy = STRATEGIES.load(spec.strategy)
        self.spec = spec
        self.distributions = {r.name: _distribution(r) for r in spec.hyperparameter_ranges}
        self._reversed = {r.name for r in spec.hyperparameter_ranges
                          if isinstance(r, ContinuousRange) and r.scaling_type == "ReverseLogarithmic"}
        storage = optuna.storages.RDBStorage(f"sqlite:///{path}") if path is not None else None
        self.study = optuna.create_study(
            study_name=spec.tuning_job_name, storage=storage, load_if_exists=True,
            direction="minimize" if spec.objective_type == "Minimize" else "maximize",
            sampler=strategy.sampler(spec),
            pruner=strategy.pruner(spec) if hasattr(strategy, "pruner") else optuna.pruners.NopPruner(),
        )
        self._running: dict = {}  # number -> the Optuna trial this process asked for


    def ask(self) -> Proposal:
        trial = self.study.ask(self.distributions)
        self._running[trial.number] = trial
        values = {name: 1 - value if name in self._reversed else value for name, value in trial.params.items()}
        return Proposal(trial.number, values)

    def report(self, number: int, step: int, value: float) -> bool:
        """Record a running trial's objective at `step` (an epoch, from 1); True when the strategy says
        it should stop there."""
        trial = self._running[number]
        trial.report(value, step)
        return trial.should_prune()

    def tell(self, number: int, value: float | None, state: str = "complete") -> None:
        """A trial's end: its final objective (None when it emitted none: the trial counts as failed)."""
        from optuna.trial import TrialState

        if state not in STATES:
            raise ValueError(f"state {state!r}: one of {', '.join(STATES)}")
        if value is None and state == "complete":
            state = "fail"
        self._running.pop(number, None)
        self.study.tell(number, value if state == "complete" else None,  # pruned: its last report counts
                        state={"complete": TrialState.COMPLETE, "pruned": TrialState.PRUNED,
                               "fail": TrialState.FAIL}[state])
