"""The one registry: built-ins loaded by name only when used, other packages' entry points merged in
(never over a built-in), and an unknown name answered with the closest one."""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint, EntryPoints

import pytest

from shipyard import registry
from shipyard.errors import ValidationError
from shipyard.registry import Registry


def test_a_built_in_is_imported_when_loaded_not_before(monkeypatch):
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    names = Registry("colours", "colour", {"hls": "colorsys:rgb_to_hls", "module": "colorsys"})
    assert list(names) == ["hls", "module"] and "colorsys" not in sys.modules
    assert names.load("hls")(1, 0, 0) == (0.0, 0.5, 1.0)
    assert names.load("module") is sys.modules["colorsys"]


def test_a_built_in_is_found_without_reading_the_installed_entry_points(monkeypatch):
    monkeypatch.setattr("shipyard.registry._installed_entry_points", lambda: pytest.fail("read the entry points"))
    names = Registry("colours", "colour", {"module": "colorsys"})
    assert "module" in names and names["module"] == "colorsys" and names.load("module").__name__ == "colorsys"


def test_entry_points_add_names_but_do_not_replace_built_ins(monkeypatch):
    found = [EntryPoint("slurm", "textwrap:dedent", "shipyard.backends"),
             EntryPoint("local", "textwrap:indent", "shipyard.backends")]
    monkeypatch.setattr("shipyard.registry._installed_entry_points", lambda: EntryPoints(found))
    backends = Registry("backends", "backend", {"local": "shipyard.backends.local:LocalBackend"})
    assert dict(backends) == {"slurm": "textwrap:dedent", "local": "shipyard.backends.local:LocalBackend"}
    assert backends.load("slurm").__name__ == "dedent"


def test_an_unknown_name_gets_the_closest():
    with pytest.raises(ValidationError, match="backend='lcoal': unknown name; did you mean 'local'"):
        Registry("backends", "backend", {"local": "x:y", "ray": "x:z"}).load("lcoal")


def test_every_registry_of_shipyard_loads_every_built_in():
    from shipyard.backends import REGISTRY as backends
    from shipyard.cli.jobfile import FRAMEWORKS
    from shipyard.control.watchers import REGISTRY as watchers
    from shipyard.parallel.strategies import REGISTRY as strategies
    from shipyard.runtime.agent import SERVICES
    from shipyard.runtime.launchers import REGISTRY as launchers
    from shipyard.server.app import ROUTES as routes
    from shipyard.spec.rules import RULES as rules
    from shipyard.spec.tuning import STRATEGIES as tuning_strategies

    for table in (backends, FRAMEWORKS, watchers, strategies, *rules.values(), SERVICES, tuning_strategies,
                  launchers, routes):
        assert isinstance(table, registry.Registry)
        for name in table:
            assert table.load(name) is not None, (table.kind, name)
        assert " " not in table.kind and table.what.islower() and not table.what.endswith("s"), table.what
