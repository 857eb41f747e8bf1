"""after_import: callbacks run right after a module's first import (every one of them, in order), at once
when it is already imported, and the finder leaves sys.meta_path once used. In a fresh interpreter, since
the module must not be imported yet."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = """
    import sys
    from shipyard.runtime.import_hooks import after_import
    calls = []
    assert "colorsys" not in sys.modules
    finders = len(sys.meta_path)
    after_import("colorsys", lambda: calls.append(("first", "colorsys" in sys.modules)))
    after_import("colorsys", lambda: calls.append(("second", "colorsys" in sys.modules)))
    assert len(sys.meta_path) == finders + 1 and calls == []
    import colorsys
    after_import("colorsys", lambda: calls.append(("already", True)))
    assert len(sys.meta_path) == finders, sys.meta_path
    print(calls)
"""


def test_every_callback_runs_once_after_the_import_and_the_finder_goes_away():
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[('first', True), ('second', True), ('already', True)]"
