"""A rule parameter as SageMaker's RuleParameters carry it: a string, parsed into the declared type.
Parsing happens at spec validation (so a wrong type is an error before anything runs) and again in the
rule, which gets typed values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shipyard.errors import ValidationError, unknown_name_error

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError("expected True or False")


def _parse_list(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


WORDS = {"int": "an integer", "float": "a number", "bool": "True or False", "str": "a string",
         "list": "a comma-separated list"}
PARSERS = {"int": int, "float": float, "bool": _parse_bool, "str": str, "list": _parse_list}


@dataclass(frozen=True)
class Parameter:
    type: str  # one of PARSERS
    default: Any = None  # None: unset (the rule decides what that means)
    help: str = ""

    def parse(self, text: str) -> Any:
        return PARSERS[self.type](text)


def parse_parameters(rule: str, declared: dict[str, Parameter], given: dict[str, str],
                     field: str = "rule_parameters") -> dict[str, Any]:
    """Typed values for every declared parameter: given ones parsed, the rest their defaults."""
    values = {name: p.default for name, p in declared.items()}
    for name, text in given.items():
        if name not in declared:
            raise unknown_name_error(f"{field} of rule {rule}", name, declared)
        try:
            values[name] = declared[name].parse(str(text))
        except ValueError as exc:
            raise ValidationError(f"{field} of rule {rule}: {name}", text,
                                  f"must be {WORDS[declared[name].type]} ({exc})") from None
    return values
