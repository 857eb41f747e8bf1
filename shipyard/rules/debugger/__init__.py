"""Built-in debugger rules, each a module registered by name (SageMaker's rule names)."""

RULES: dict[str, str] = {
    "VanishingGradient": "shipyard.rules.debugger.vanishing_gradient",
    "ExplodingTensor": "shipyard.rules.debugger.exploding_tensor",
    "LossNotDecreasing": "shipyard.rules.debugger.loss_not_decreasing",
    "DeadRelu": "shipyard.rules.debugger.dead_relu",
}
