from __future__ import annotations

import pytest


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh SHIPYARD_HOME: its own store, job directories and default output path."""
    path = tmp_path / "home"
    monkeypatch.setenv("SHIPYARD_HOME", str(path))
    return path
