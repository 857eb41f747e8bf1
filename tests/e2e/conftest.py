from __future__ import annotations

import pytest


@pytest.fixture
def wait_for_line():
    """Wait (at most `timeout` seconds) until a log file contains `text`."""
    import time

    def wait(log, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert text in (log.read_text() if log.exists() else ""), f"{text!r} never appeared in {log}"

    return wait
