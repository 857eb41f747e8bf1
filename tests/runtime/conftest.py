"""Fixtures of the runtime tests."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["sandbox", "plain"])
def mode(request, monkeypatch):
    """Plans made with the sandbox (skipped where bwrap cannot run) and without it."""
    from shipyard.backends import sandbox

    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    if request.param == "plain":
        monkeypatch.setenv("SHIPYARD_SANDBOX", "off")
    elif sandbox.bwrap_problem():
        pytest.skip(f"no sandbox here: {sandbox.bwrap_problem()}")
    else:
        monkeypatch.delenv("SHIPYARD_SANDBOX", raising=False)
    return request.param
