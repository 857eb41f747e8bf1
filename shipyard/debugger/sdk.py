"""The SDK side: Rule.sagemaker / Rule.custom build RuleConfigs; `rule_configs.<rule>()` gives a built-in
rule's base config; hook_and_rules applies the SDK's defaulting (rules but no hook config: a default hook
saving the collections the rules need; debugger_hook_config=False: no hook)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipyard.errors import ValidationError
from shipyard.spec.build import build as build_model
from shipyard.spec.debugger import CollectionConfig, DebuggerHookConfig
from shipyard.spec.rules import NotifyCommand, NotifyWebhook, RuleConfig, StopTraining


@dataclass(frozen=True)
class BuiltinRule:
    """What rule_configs.<name>() returns: a built-in rule of a kind."""

    kind: str
    rule: str
    collections: dict = field(default_factory=dict)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()  # NLPSequence: nlp_sequence


class Rule:
    @staticmethod
    def sagemaker(base_config: BuiltinRule, name: str | None = None, rule_parameters: dict | None = None,
                  collections_to_save: list | None = None, actions: Any = None) -> RuleConfig:
        if not isinstance(base_config, BuiltinRule):
            raise ValidationError("base_config", base_config, "use shipyard.debugger.rule_configs.<rule>()")
        collections = collections_to_save or [CollectionConfig(name=n, parameters=p)
                                              for n, p in base_config.collections.items()]
        return RuleConfig(kind=base_config.kind, name=name or base_config.rule, rule=base_config.rule,
                          parameters={k: str(v) for k, v in (rule_parameters or {}).items()},
                          actions=_actions(actions),
                          collections_to_save=tuple({"name": c.name, "parameters": c.parameters} for c in collections))

    @staticmethod
    def custom(name: str, source: str, rule_to_invoke: str, rule_parameters: dict | None = None,
               collections_to_save: list | None = None, actions: Any = None, **_ignored) -> RuleConfig:
        """A rule class in a Python file (image_uri, instance_type, ... mean nothing here)."""
        return RuleConfig(kind="debugger", name=name, rule="custom", custom_source=str(Path(source).resolve()),
                          custom_class=rule_to_invoke,
                          parameters={k: str(v) for k, v in (rule_parameters or {}).items()},
                          actions=_actions(actions),
                          collections_to_save=tuple({"name": c.name, "parameters": c.parameters}
                                                    for c in collections_to_save or ()))


def _actions(actions: Any) -> tuple:
    """A rule's actions (one, a list, or rule_configs.ActionList), each checked to have what it needs to be
    sent before the job runs: Email a configured SMTP server, SMS a configured gateway."""
    if actions is None:
        return ()
    actions = tuple(actions) if isinstance(actions, (list, tuple)) else (actions,)
    from shipyard import settings

    for action in actions:
        for kind, value, variable, example in (
                ("email", settings.smtp_url(), "SHIPYARD_SMTP_URL", "smtp://mail.example.com:587"),
                ("sms", settings.sms_webhook_url(), "SHIPYARD_SMS_WEBHOOK_URL", "https://sms.example.com/send")):
            if getattr(action, "type", None) == kind and not value:
                raise ValidationError("actions", action, f"sending {kind} needs {variable}; set it, e.g. "
                                      f"{variable}={example} (docs/debugger.md)")
    return actions


def StopTrainingAction() -> StopTraining:  # noqa: N802 (SageMaker's name)
    return StopTraining()


def WebhookAction(url: str) -> NotifyWebhook:  # noqa: N802
    return NotifyWebhook(url=url)


def CommandAction(argv: list[str]) -> NotifyCommand:  # noqa: N802
    return NotifyCommand(argv=tuple(argv))


def hook_and_rules(rules: Any, hook: Any) -> tuple[tuple[RuleConfig, ...], DebuggerHookConfig | None]:
    # A job.yaml gives each rule as a dict of RuleConfig's fields.
    rules = tuple(build_model(RuleConfig, "rules", **r) if isinstance(r, dict) else r for r in rules or ())
    for rule in rules:
        if not isinstance(rule, RuleConfig):
            raise ValidationError("rules", rule, "give Rule.sagemaker(...), Rule.custom(...) or ProfilerRule.sagemaker(...)")
    if hook is False:
        return rules, None
    if isinstance(hook, dict):
        hook = build_model(DebuggerHookConfig, "debugger_hook_config", **hook)
    debugger_rules = [r for r in rules if r.kind == "debugger"]
    if hook is None and not debugger_rules:
        return rules, None  # off unless asked: no hook, nothing imported into the training processes
    hook = hook or DebuggerHookConfig()
    needed = tuple(CollectionConfig(name=c.name, parameters=c.parameters)
                   for r in debugger_rules for c in r.collections_to_save)
    return rules, hook.with_collections(needed)
