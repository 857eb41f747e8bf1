"""SageMaker's rule_configs: one function per built-in rule returning its base config, named as in
smdebug_rulesconfig (vanishing_gradient(), exploding_tensor(), ...); profiler rules by class name
(CPUBottleneck(), ...); and SageMaker's rule actions: ActionList, StopTraining, Email and SMS."""

from __future__ import annotations

from shipyard.debugger.sdk import BuiltinRule, _snake
from shipyard.errors import ValidationError
from shipyard.spec.rules import RULES, NotifyEmail, NotifySMS, rule_module
from shipyard.spec.rules import StopTraining as _StopTraining


class ActionList(tuple):
    """SageMaker's ActionList(*actions): what a rule does when it fires (actions=...)."""

    def __new__(cls, *actions):
        return super().__new__(cls, actions)


def StopTraining(training_job_prefix: str | None = None) -> _StopTraining:  # noqa: N802 (SageMaker's name)
    """Stop the rule's job when the rule fires."""
    if training_job_prefix is not None:
        raise ValidationError("StopTraining.training_job_prefix", training_job_prefix,
                              "a rule here stops its own job only; remove training_job_prefix")
    return _StopTraining()


def Email(email_address: str) -> NotifyEmail:  # noqa: N802
    """Mail the finding to `email_address` (through SHIPYARD_SMTP_URL)."""
    return NotifyEmail(email_address=email_address)


def SMS(phone_number: str) -> NotifySMS:  # noqa: N802
    """Text the finding to `phone_number` (through the gateway at SHIPYARD_SMS_WEBHOOK_URL)."""
    return NotifySMS(phone_number=phone_number)


def _builtin(kind: str, rule: str) -> BuiltinRule:
    return BuiltinRule(kind, rule, dict(getattr(rule_module(kind, rule), "COLLECTIONS", {})))


def __getattr__(name: str):
    for rule in RULES["debugger"]:
        if name in (_snake(rule), rule):
            return lambda: _builtin("debugger", rule)
    if name in RULES["profiler"]:
        return lambda: _builtin("profiler", name)
    from shipyard.errors import closest

    known = [_snake(r) for r in RULES["debugger"]] + list(RULES["profiler"])
    guess = closest(name, known)
    raise AttributeError(f"no built-in rule {name!r}" + (f"; did you mean {guess!r}?" if guess else
                                                          f"; known: {', '.join(sorted(known))}"))
