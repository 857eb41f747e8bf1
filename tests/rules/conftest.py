"""Synthetic trials for the debugger rules: steps written with the debugger's own storage Writer into
tmp_path and read back with its Trial, so the rules see exactly what a job's hook leaves behind."""
from __future__ import annotations

import re

import numpy as np
import pytest

from shipyard.contract.debugger.collections import BUILTIN_REGEX
from shipyard.contract.debugger.storage import Writer
from shipyard.rules.debugger.trials import Trial
from shipyard.spec.rule_parameters import parse_parameters
from shipyard.spec.rules import rule_module


class Steps:
    """Writes steps of one worker; each tensor lands in the built-in collections whose regex matches its
    name, as the hook files them."""

    def __init__(self, root) -> None:
        self.root = root
        self.writer = Writer(root, "worker_0")
        self.mode_steps: dict[str, int] = {}
        self.next_step = 0

    def add(self, tensors: dict, mode: str = "train", step: int | None = None, mode_step: int | None = None) -> int:
        """Writes the next global step (or `step`), as the next step of `mode` (or `mode_step`)."""
        step = self.next_step if step is None else step
        mode_step = self.mode_steps.get(mode, 0) if mode_step is None else mode_step
        self.mode_steps[mode] = mode_step + 1
        self.next_step = step + 1
        raw = {name: np.asarray(value, dtype=np.float64) for name, value in tensors.items()}
        entries = {name: {"shape": list(v.shape), "raw": True, "reductions": {},
                          "collections": [c for c, rx in BUILTIN_REGEX.items()
                                          if c not in ("all", "default") and re.search(rx, name)]}
                   for name, v in raw.items()}
        self.writer.write_step(step, mode, mode_step, raw, entries)
        return step

    def trial(self) -> Trial:
        return Trial(str(self.root))


@pytest.fixture
def steps(tmp_path):
    made = []

    def make(name: str = "trial") -> Steps:
        made.append(Steps(tmp_path / name))
        return made[-1]

    return make


def make_rule(rule: str, trial, **given):
    """The built-in rule as a job makes it: parameters given as strings, parsed against PARAMETERS and checked
    together (the module's check, as spec/rules.py does when the rule is configured)."""
    module = rule_module("debugger", rule)
    values = parse_parameters(rule, module.PARAMETERS, {k: str(v) for k, v in given.items()})
    getattr(module, "check", lambda _values: None)(values)
    return module.RULE(trial, **values)


def first_firing(rule_name: str, trial, **given):
    """(the first global step at which the rule's condition is met, or None; the rule)."""
    rule = make_rule(rule_name, trial, **given)
    for step in trial.steps():
        if rule.invoke_at_step(step):
            return step, rule
    return None, rule
