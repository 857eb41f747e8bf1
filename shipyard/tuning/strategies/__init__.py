"""Tuning strategies, each a module registered by SageMaker's name in shipyard/spec/tuning.py
(STRATEGIES): `sampler(spec)` gives the Optuna sampler that proposes the next trial's hyperparameters,
and `pruner(spec)`, where a strategy has one, decides from a running trial's intermediate objective
values whether it stops."""
