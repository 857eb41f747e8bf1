from __future__ import annotations

import pytest


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh SHIPYARD_HOME; on teardown, jobs left running (a failed test) are asked to stop."""
    path = tmp_path / "home"
    monkeypatch.setenv("SHIPYARD_HOME", str(path))
    yield path
    if (path / "shipyard.db").exists():
        from shipyard.store import Store

        store = Store(path)
        for record in store.list_jobs():
            if not record.terminal:
                store.request_stop(record.name)


@pytest.fixture
def runner():
    from click.testing import CliRunner

    return CliRunner()
