"""Tuning strategies, each a module registered by SageMaker's name in shipyard/spec/tuning.py
(STRATEGIES): `sampler(spec)` gives the Optuna sampler that proposes the next trial's hyperparameters.
Hyperband's module also holds its rungs and promotion rule, which the tuning process applies."""
