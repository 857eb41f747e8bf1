"""Hyperparameter tuning beside jobs (SageMaker's HyperparameterTuner): the search over a TuningSpec's
ranges on Optuna (search.py, with a strategy per module in strategies/), and SageMaker's median stopping
rule (early_stopping.py). Every trial is a full shipyard job."""
