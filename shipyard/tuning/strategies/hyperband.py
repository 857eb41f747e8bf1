"""Hyperband as SageMaker runs it: asynchronous successive halving (ASHA) over the objective values each
trial emits, with trials drawn at random. A trial reaching a rung (min_resource x 3^k epochs) goes on
only while it is in the top third of the trials that reached that rung; none stops before min_resource
and every one stops at max_resource (the trial's own end)."""

from __future__ import annotations

REDUCTION_FACTOR = 3


def sampler(spec):
    import optuna

    return optuna.samplers.RandomSampler(seed=spec.random_seed)


def pruner(spec):
    import optuna

    return optuna.pruners.SuccessiveHalvingPruner(min_resource=spec.min_resource(),
                                                  reduction_factor=REDUCTION_FACTOR)
