"""Rules that run beside a job: debugger rules (shipyard/rules/debugger/) and profiler rules
(shipyard/rules/profiler/). Each kind's package has a RULES registry, rule name -> module; each rule
module declares PARAMETERS (name -> Parameter, SageMaker's names, types and defaults) and COLLECTIONS (the
debugger collections it needs saved), and may define check(values) raising ValueError for parameters that
only make sense together (AllZero needs collection_names or tensor_regex). Specs validate against these declarations without running
anything, so importing a rule module must stay cheap (no torch at module level)."""

from __future__ import annotations

import importlib
from types import ModuleType

from shipyard.registry import Registry

KINDS = ("debugger", "profiler")


def registry(kind: str) -> Registry:
    return importlib.import_module(f"shipyard.rules.{kind}").RULES


def rule_module(kind: str, name: str) -> ModuleType:
    return registry(kind).load(name)
