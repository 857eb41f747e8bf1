"""The debugger: tensors saved by a hook, read back with trial(), judged by rules. See docs/debugger.md.
The names load when first used: the hook in a training process imports this package without them (and
`Hook` stays torch-free until a hook is made)."""

from shipyard.lazy import exports

__all__ = ["CollectionConfig", "CommandAction", "DebuggerHookConfig", "Hook", "Rule", "StopTrainingAction",
           "TensorBoardOutputConfig", "WebhookAction", "modes", "rule_configs", "trial"]
__getattr__ = exports(__name__, {
    **{name: f"shipyard.debugger.sdk:{name}" for name in ("CommandAction", "Rule", "StopTrainingAction", "WebhookAction")},
    **{name: f"shipyard.spec.debugger:{name}"
       for name in ("CollectionConfig", "DebuggerHookConfig", "TensorBoardOutputConfig")},
    "Hook": "shipyard.runtime.debugger.hook:Hook", "trial": "shipyard.rules.debugger.trials:trial",
    "modes": "shipyard.contract.debugger.modes", "rule_configs": "shipyard.debugger.rule_configs",
})
