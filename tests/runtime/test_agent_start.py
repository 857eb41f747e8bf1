"""What a cold agent spends before its script starts: what it imports for local code and for channels it
does not have (each import is paid by every cold job's first batch: docs/benchmarks.md, input modes)."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile

PROBE = """
import sys
from pathlib import Path
from types import MethodType, SimpleNamespace

from shipyard.runtime.agent import Agent

code, instance, archive = map(Path, sys.argv[1:4])
host = SimpleNamespace(layout=SimpleNamespace(code_dir=code), say=print, config=SimpleNamespace(
    algorithm=None, instance_dir=str(instance), channels=()))
host._in_mode = MethodType(Agent._in_mode, host)
Agent.fetch_code(host, SimpleNamespace(module_dir=f"file://{archive}"))
Agent._start_streams(host)
Agent._start_lazy_files(host)
print(sorted(m for m in ("fsspec", "s3fs", "botocore", "shipyard.runtime.pipe", "shipyard.runtime.lazyfiles")
             if m in sys.modules))
"""


def test_local_code_is_extracted_in_place_and_absent_channels_import_nothing(tmp_path):
    archive = tmp_path / "sourcedir.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        body = b"print('hello')\n"
        info = tarfile.TarInfo("train.py")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    code, instance = tmp_path / "code", tmp_path / "instance"
    code.mkdir()
    instance.mkdir()
    done = subprocess.run([sys.executable, "-c", PROBE, str(code), str(instance), str(archive)],
                          capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == [f"code: 1 files extracted from file://{archive}", "[]"]
    assert (code / "train.py").read_bytes() == b"print('hello')\n"
    assert list(instance.iterdir()) == []   # no staging copy
