"""The debugger: tensors saved by a hook, read back with trial(), judged by rules. See docs/debugger.md."""

from shipyard.debugger import modes, rule_configs
from shipyard.debugger.sdk import CommandAction, Rule, StopTrainingAction, WebhookAction
from shipyard.debugger.trial import trial
from shipyard.spec.debugger import CollectionConfig, DebuggerHookConfig


def __getattr__(name: str):
    if name == "Hook":  # the explicit API; importing it stays torch-free until a hook is made
        from shipyard.debugger.hook import Hook

        return Hook
    raise AttributeError(name)


__all__ = ["CollectionConfig", "CommandAction", "DebuggerHookConfig", "Hook", "Rule", "StopTrainingAction",
           "WebhookAction", "modes", "rule_configs", "trial"]
