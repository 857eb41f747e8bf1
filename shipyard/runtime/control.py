"""Controller -> agent commands, through one small JSON file in the instance directory (visible inside
the sandbox, and on any backend that can write a file on the instance's node). The file keeps the newest
command of each action, so a command never replaces one of another action (a "profiler" update sent
between "pause" and "resume"); each carries a sequence number so a reader acts on each once."""

from __future__ import annotations

import json
import os
from pathlib import Path

CONTROL_FILE = "control.json"
CONTROL_POLL_SECONDS = 0.2


class ControlChannel:
    def __init__(self, path: Path) -> None:
        self.path, self.seen = Path(path), {}

    def _commands(self) -> dict[str, dict]:
        try:
            return json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def send(self, action: str, **fields: object) -> None:
        """Write a command (controller side); replaces an earlier one of the same action."""
        commands = self._commands()
        seq = max((c["seq"] for c in commands.values()), default=0) + 1
        commands[action] = {"seq": seq, "action": action, **fields}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(commands))
        os.replace(tmp, self.path)

    def poll(self, action: str) -> dict | None:
        """The newest command of `action` not returned before (agent side), or None."""
        command = self._commands().get(action)
        if command is None or command["seq"] <= self.seen.get(action, 0):
            return None
        self.seen[action] = command["seq"]
        return command
