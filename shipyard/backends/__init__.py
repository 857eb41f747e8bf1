"""Where instances run. A backend turns a job into instance plans (`plan()`, pure: the exact command
line and environment of every instance) and starts them; the controller never cares which backend."""

from __future__ import annotations

import importlib

REGISTRY: dict[str, str] = {
    "local": "shipyard.backends.local:LocalBackend",
    "ray": "shipyard.backends.ray:RayBackend",
}


def get_backend(name: str, **kwargs):
    from shipyard.errors import unknown_name_error

    if name not in REGISTRY:
        raise unknown_name_error("backend", name, REGISTRY)
    module, _, attr = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), attr)(**kwargs)
