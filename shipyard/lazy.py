"""Lazy re-exports for a package's public names (PEP 562), so that the names users import stay where the
docs show them (`from shipyard.debugger import Hook, trial`) while the code lives in its layer, and a
name costs nothing until it is used. A package's `__getattr__ = exports(__name__, {name:
"module:attribute" or "module"})`: an attribute of that module, or the module itself. `alias` makes a
module path users import (`shipyard.profiler.data`) the module that now holds its code."""

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


def alias(name: str, target: str) -> None:
    """Called by module `name` as it is imported: the import gives module `target` instead (the import
    system returns whatever sys.modules holds for the name once the module has run)."""
    sys.modules[name] = importlib.import_module(target)
