"""Built-in debugger rules, each a module registered by name (SageMaker's rule names): every rule SageMaker
documents for PyTorch and tabular jobs. The XGBoost-only FeatureImportanceOverweight and TreeDepth are not
here: they read the XGBoost hook's collections (feature_importance, trees), and there is no XGBoost hook."""

from shipyard.registry import Registry

RULES = Registry("debugger_rules", "debugger rule", {
    "VanishingGradient": "shipyard.rules.debugger.vanishing_gradient",
    "ExplodingTensor": "shipyard.rules.debugger.exploding_tensor",
    "LossNotDecreasing": "shipyard.rules.debugger.loss_not_decreasing",
    "DeadRelu": "shipyard.rules.debugger.dead_relu",
    "PoorWeightInitialization": "shipyard.rules.debugger.poor_weight_initialization",
    "SaturatedActivation": "shipyard.rules.debugger.saturated_activation",
    "WeightUpdateRatio": "shipyard.rules.debugger.weight_update_ratio",
    "AllZero": "shipyard.rules.debugger.all_zero",
    "ClassImbalance": "shipyard.rules.debugger.class_imbalance",
    "Confusion": "shipyard.rules.debugger.confusion",
    "Overfit": "shipyard.rules.debugger.overfit",
    "Overtraining": "shipyard.rules.debugger.overtraining",
    "SimilarAcrossRuns": "shipyard.rules.debugger.similar_across_runs",
    "TensorVariance": "shipyard.rules.debugger.tensor_variance",
    "UnchangedTensor": "shipyard.rules.debugger.unchanged_tensor",
    "StalledTrainingRule": "shipyard.rules.debugger.stalled_training_rule",
    "CheckInputImages": "shipyard.rules.debugger.check_input_images",
    "NLPSequenceRatio": "shipyard.rules.debugger.nlp_sequence_ratio",
})
