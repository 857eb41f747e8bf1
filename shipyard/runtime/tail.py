"""Reading a file that other processes append to: each call returns the complete lines added since the
last one, so a reader can poll without ever seeing half a line (or, with `final`, take the last
unterminated line once the writers are gone)."""

from __future__ import annotations

from pathlib import Path


class FileTail:
    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path, self.offset = Path(path), offset

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


def end_of_last_line(path: Path, window: int = 1 << 16) -> int:
    """The offset just after the file's last complete line (a line being written is read later), or the
    end of the file when its last `window` bytes hold no line break."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            start = max(0, size - window)
            f.seek(start)
            newline = f.read().rfind(b"\n")
    except FileNotFoundError:
        return 0
    return start + newline + 1 if newline >= 0 or start == 0 else size
