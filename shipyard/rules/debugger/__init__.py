"""Built-in debugger rules, each a module registered by SageMaker's name in shipyard/spec/rules.py: every rule SageMaker
documents for PyTorch and tabular jobs. The XGBoost-only FeatureImportanceOverweight and TreeDepth are not
here: they read the XGBoost hook's collections (feature_importance, trees), and there is no XGBoost hook.
Also here: base.py (what a rule sees), trials.py (reading saved tensors), watcher.py (rules beside a job)."""
