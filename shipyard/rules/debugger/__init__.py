"""Built-in debugger rules, each a module registered by SageMaker's name in shipyard/spec/rules.py: every rule SageMaker
documents for PyTorch and tabular jobs, and the XGBoost-only FeatureImportanceOverweight and TreeDepth, which
read the built-in XGBoost algorithm's collections (feature_importance, trees; shipyard/algorithms/xgboost/debug.py).
Also here: base.py (what a rule sees), trials.py (reading saved tensors), watcher.py (rules beside a job)."""
