"""Agent -> controller events, one JSON object per line, appended and flushed, so a reader sees every
event written before any crash and can start reading again from the beginning at any time."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from shipyard.runtime.tail import FileTail


class EventWriter:
    def __init__(self, path: Path, host: str) -> None:
        self.path, self.host = path, host

    def emit(self, event: str, **fields: object) -> None:
        line = json.dumps({"ts": time.time(), "host": self.host, "event": event, **fields}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


class EventReader:
    """Incremental reader: returns only events not returned before."""

    def __init__(self, path: Path) -> None:
        self.tail = FileTail(path)

    def read(self) -> list[dict]:
        return [json.loads(line) for line in self.tail.read() if line.strip()]
