"""Controller -> agent commands, through one small JSON file in the instance directory (visible inside
the sandbox, and on any backend that can write a file on the instance's node). Each command carries a
sequence number so a reader acts on each once."""

from __future__ import annotations

import json
import os
from pathlib import Path

CONTROL_FILE = "control.json"
CONTROL_POLL_SECONDS = 0.2


class ControlChannel:
    def __init__(self, path: Path) -> None:
        self.path, self.seen = Path(path), 0

    def send(self, action: str, **fields: object) -> None:
        """Write a command (controller side); replaces any earlier one."""
        seq = 1
        if self.path.exists():
            seq = json.loads(self.path.read_text()).get("seq", 0) + 1
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"seq": seq, "action": action, **fields}))
        os.replace(tmp, self.path)

    def poll(self) -> dict | None:
        """The newest command not returned before (agent side), or None."""
        try:
            command = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        if command.get("seq", 0) <= self.seen:
            return None
        self.seen = command["seq"]
        return command
