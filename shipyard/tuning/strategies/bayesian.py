"""Bayesian: Optuna's TPE sampler. Chosen over its GP sampler because TPE handles SageMaker's mixed
continuous, integer and categorical ranges natively, costs milliseconds per proposal at hundreds of
trials (a GP's fit grows with the cube of them), and with `constant_liar` stays useful when several
trials run at once (max_parallel_jobs), which is where a sequential Bayesian search weakens (C.3).
Multivariate, so interacting hyperparameters (learning rate and batch size) are modelled together."""

from __future__ import annotations


def sampler(spec):
    import warnings

    import optuna

    with warnings.catch_warnings():  # `group` is marked experimental; its behaviour is what we need
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # group: with several training definitions each has its own parameters, modelled apart.
        return optuna.samplers.TPESampler(seed=spec.random_seed, multivariate=True,
                                          group=len(spec.definitions) > 1, constant_liar=True,
                                          n_startup_trials=min(10, max(2, spec.total_jobs() // 5)))
