"""Run a module's forward inside a context manager without wrapping the module (its type, parameter
names and state-dict keys stay as they are)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from torch import nn


def around_forward(module: nn.Module, context: Callable[[], AbstractContextManager]) -> None:
    active: list[AbstractContextManager] = []

    def enter(_module, _args):
        manager = context()
        manager.__enter__()
        active.append(manager)

    def leave(_module, _args, output):
        active.pop().__exit__(None, None, None)
        return output

    module.register_forward_pre_hook(enter)
    module.register_forward_hook(leave, always_call=True)
