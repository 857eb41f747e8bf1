"""Hyperband as SageMaker runs it, asynchronous successive halving (ASHA), with configurations drawn at
random. Rungs are min_resource x 3^k epochs (and max_resource, where every configuration stops). When a
configuration's objective reaches a rung it goes on only while it is in the top third of the values
every configuration had there; otherwise it is paused. A slot that frees first promotes a paused
configuration that has since come into the top third (the highest rung first), and only then starts a
new one, so no configuration waits on a rung's full cohort. Promoted configurations resume from their
checkpoints (spec.hyperband.resume) instead of training again from epoch 1."""

from __future__ import annotations

from collections.abc import Sequence

REDUCTION_FACTOR = 3


def sampler(spec):
    import optuna

    return optuna.samplers.RandomSampler(seed=spec.random_seed)


def rungs(min_resource: int, max_resource: int) -> list[int]:
    """The epochs at which configurations are compared, below max_resource."""
    out, rung = [], min_resource
    while rung < max_resource:
        out.append(rung)
        rung *= REDUCTION_FACTOR
    return out


def promotable(value: float, competing: Sequence[float], minimize: bool) -> bool:
    """Whether `value` is among the best 1/3 of `competing` (the values at a rung, its own included):
    at least the best one always is (ASHA's rule, as Optuna's SuccessiveHalvingPruner applies it)."""
    ranked = sorted(competing, reverse=not minimize)
    cut = ranked[max(1, len(ranked) // REDUCTION_FACTOR) - 1]
    return value <= cut if minimize else value >= cut
