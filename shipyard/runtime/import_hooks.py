"""Run code right after a module is imported, without importing it ourselves: how the heartbeat and
the profiler attach to torch only in scripts that use it (and from their first step)."""

from __future__ import annotations

import importlib.machinery
import sys
from collections.abc import Callable


class _AfterImport:
    """A meta path finder for one module name and every callback waiting for it; it removes itself once
    that module is found."""

    def __init__(self, name: str) -> None:
        self.name, self.callbacks = name, []

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        del _waiting[name]
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            exec_module, callbacks = spec.loader.exec_module, self.callbacks

            def exec_and_call(module) -> None:
                exec_module(module)
                for callback in callbacks:
                    callback()

            spec.loader.exec_module = exec_and_call
        return spec


_waiting: dict[str, _AfterImport] = {}  # one finder per module name, however many callbacks wait for it


def after_import(name: str, callback: Callable[[], None]) -> None:
    """`callback()` once module `name` is imported: now if it already is."""
    if name in sys.modules:
        callback()
        return
    if name not in _waiting:
        _waiting[name] = _AfterImport(name)
        sys.meta_path.insert(0, _waiting[name])
    _waiting[name].callbacks.append(callback)
