"""SageMaker's rule_configs: one function per built-in rule returning its base config, named as in
smdebug_rulesconfig (vanishing_gradient(), exploding_tensor(), ...); profiler rules by class name
(CPUBottleneck(), ...)."""

from __future__ import annotations

from shipyard.debugger.sdk import BuiltinRule, _snake
from shipyard.spec.rules import RULES, rule_module


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
