"""What a training process loads from shipyard: the in-process parts (heartbeat, the debugger hook, the
profiler's step recorder) import neither the SDK, the rules nor pydantic, while the packages' public
names still resolve for users (lazy re-exports, shipyard/lazy.py)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

IN_PROCESS = ("shipyard.runtime.heartbeat", "shipyard.runtime.process_group_exit", "shipyard.runtime.debugger.hook",
              "shipyard.runtime.profiler.steps", "shipyard.runtime.profiler.phases", "shipyard.runtime.profiler.dataloader")


def test_the_in_process_parts_load_no_sdk_rules_or_pydantic():
    code = (f"import sys\nfor m in {IN_PROCESS!r}: __import__(m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic' or m.startswith("
            "('shipyard.sdk', 'shipyard.rules', 'shipyard.spec', 'shipyard.control', 'shipyard.store'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


@pytest.mark.parametrize("package", ["shipyard", "shipyard.debugger", "shipyard.profiler", "shipyard.tuner"])
def test_every_public_name_resolves(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        module.Nope  # noqa: B018


def test_a_submodule_imported_first_does_not_hide_a_function_of_the_same_package():
    code = "import shipyard.rules.debugger.watcher\nfrom shipyard.debugger import trial\nprint(callable(trial))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "True\n"
