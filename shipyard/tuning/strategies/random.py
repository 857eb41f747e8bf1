"""Random: each trial drawn independently, honouring each range's scaling, so any parallelism costs
nothing; random_seed makes the sequence reproducible."""

from __future__ import annotations


def sampler(spec):
    import optuna

    return optuna.samplers.RandomSampler(seed=spec.random_seed)
