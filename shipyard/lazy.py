"""Lazy re-exports for a package's public names (PEP 562): `import shipyard.profiler.steps` in a
training process must not import the SDK, the rules and pydantic because the package's __init__ names
them for users. A package's `__getattr__ = exports(__name__, {name: "module:attribute" or "module"})`: an
attribute of that module, or the module itself."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def exports(package: str, table: dict[str, str]) -> Callable[[str], Any]:
    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = table[name].partition(":")
        value = importlib.import_module(module)
        value = getattr(value, attribute) if attribute else value
        setattr(sys.modules[package], name, value)  # looked up once
        return value

    return __getattr__
