"""One kind of registry for everything shipyard finds by name: backends, launchers, parallel
strategies, watchers, rules, agent services, job-file frameworks, tuning strategies, server routes.

Built-ins are `"module:attribute"` (or `"module"`) strings, imported only when used, so a name costs
nothing until a job asks for it. Other packages add entries through the entry-point group
`shipyard.<kind>` (`[project.entry-points."shipyard.backends"] slurm = "mypkg.slurm:SlurmBackend"`);
a built-in name cannot be taken over. An unknown name is shipyard's ValidationError naming the closest
one."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator, Mapping
from typing import Any


class Registry(Mapping[str, str]):
    """name -> the object's import path; `load(name)` imports it."""

    def __init__(self, kind: str, what: str, builtins: dict[str, str]) -> None:
        self.kind = kind   # the entry-point group is shipyard.<kind>
        self.what = what   # how an error names the field: "backend", "parallel strategy", ...
        self._builtins = dict(builtins)

    @functools.cached_property
    def _entries(self) -> dict[str, str]:
        added = {ep.name: ep.value for ep in _installed_entry_points().select(group=f"shipyard.{self.kind}")}
        return {**added, **self._builtins}

    # A built-in name is answered without reading the installed entry points (no package can take it over):
    # a job's processes mostly ask for built-ins.
    def __getitem__(self, name: str) -> str:
        return self._builtins[name] if name in self._builtins else self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._builtins or name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def load(self, name: str) -> Any:
        if name not in self:
            from shipyard.errors import unknown_name_error

            raise unknown_name_error(self.what, name, self._entries)
        module, _, attribute = self[name].partition(":")
        loaded = importlib.import_module(module)
        return getattr(loaded, attribute) if attribute else loaded


@functools.cache
def _installed_entry_points():
    """Every installed distribution's entry points, read once per process: a read scans them all (about
    40 ms in a venv with torch, TensorFlow and Ray), and a job's processes look in several registries."""
    from importlib.metadata import entry_points

    return entry_points()
