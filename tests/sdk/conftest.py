from __future__ import annotations

import pytest


@pytest.fixture
def script(tmp_path):
    """A source_dir holding train.py."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('hi')\n")
    return source
