"""Grid: every combination of the categorical ranges, once each (the spec refuses any other range), in
an order fixed by random_seed."""

from __future__ import annotations


def sampler(spec):
    import optuna

    class Grid(optuna.samplers.GridSampler):
        def after_trial(self, study, trial, state, values) -> None:
            """The tuning job runs exactly the grid's size; Optuna's own end (study.stop()) works only
            inside study.optimize, which a search of separate jobs does not use."""

    return Grid({r.name: list(r.values) for r in spec.only.hyperparameter_ranges}, seed=spec.random_seed)
