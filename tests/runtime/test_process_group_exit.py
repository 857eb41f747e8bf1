"""A script that made a gloo group leaves through process_group_exit's clean exit: it ends 0 with what it
wrote flushed, and prints nothing of its own (no FutureWarning from looking at torch's deprecated names)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    from shipyard.runtime import process_group_exit
    process_group_exit.install()
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}", rank=0, world_size=1)
    out = open({path!r}, "w")
    out.write("written, never closed")
""")


def test_a_gloo_script_ends_cleanly_with_its_files_flushed_and_no_warning(tmp_path):
    pytest.importorskip("torch")
    from shipyard.runtime.ports import free_port

    path = tmp_path / "left-open.txt"
    done = subprocess.run([sys.executable, "-W", "always", "-c", SCRIPT.format(port=free_port(), path=str(path))],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert path.read_text() == "written, never closed"
    assert "Warning" not in done.stderr, done.stderr
