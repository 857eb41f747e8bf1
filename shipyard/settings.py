"""Settings every layer reads from the environment, defined once."""

from __future__ import annotations

import os
from pathlib import Path


def shipyard_home() -> Path:
    """SHIPYARD_HOME (default ~/.shipyard): the store, job directories and the user's instance catalog."""
    return Path(os.environ.get("SHIPYARD_HOME") or Path.home() / ".shipyard").expanduser()
