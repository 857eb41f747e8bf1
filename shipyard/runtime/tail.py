"""Reading a file that other processes append to: each call returns the complete lines added since the
last one, so a reader can poll without ever seeing half a line (or, with `final`, take the last
unterminated line once the writers are gone)."""

from __future__ import annotations

from pathlib import Path


class FileTail:
    def __init__(self, path: Path) -> None:
        self.path, self.offset = Path(path), 0

    def read(self, final: bool = False) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = len(data) if final else data.rfind(b"\n") + 1
        self.offset += end
        return data[:end].decode(errors="replace").splitlines()
