"""The toolkit's failure message for a script that exited non-zero:

    ExecuteUserScriptError:
    ExitCode N
    ErrorMessage "<the error the script printed>"
    Command "<argv>"

The error is taken from the host's log from the last traceback on (or the last lines when there is
none), so the reason names what went wrong rather than just an exit code."""

from __future__ import annotations

import re
from pathlib import Path

_TAIL_BYTES = 16384
_ERROR_LINE = re.compile(r"^(\w+\.)*\w*(Error|Exception|Interrupt)\b")
# torchrun prints a rank's traceback with this prefix, then its own, which says only that a child failed.
_RANK_ERROR_LINE = re.compile(r"^\[rank\d+\]: (\w+\.)*\w*(Error|Exception|Interrupt)\b")
# What a rank's error says when it failed only because a peer went away (its collective broke).
PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "remote process exited")


def _peer_lost(line: str) -> bool:
    return any(text in line for text in PEER_LOST)


def only_peer_lost(message: str) -> bool:
    """Whether a failure message's error (the first exception line of its ErrorMessage, or of the whole
    message without one) says only that a peer went away."""
    for line in message.split('ErrorMessage "', 1)[-1].splitlines():
        if _RANK_ERROR_LINE.match(line) or _ERROR_LINE.match(line):
            return _peer_lost(line)
    return False


def error_excerpt(log: Path, start: int = 0, max_lines: int = 20) -> str:
    with open(log, "rb") as f:
        f.seek(max(start, f.seek(0, 2) - _TAIL_BYTES))
        lines = f.read().decode(errors="replace").splitlines()
    lines = [line for line in lines if " shipyard-agent " not in line]
    # A rank's own exception first: the first that failed for its own reason, else the first.
    ranks = [line for line in lines if _RANK_ERROR_LINE.match(line)]
    lead = ([line for line in ranks if not _peer_lost(line)] or ranks)[:1]
    excerpt = lines[-max_lines:]
    tracebacks = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    if tracebacks:
        lines = lines[tracebacks[-1]:]
        # The exception line itself is what people need first; keep the last frames as context.
        errors = [line for line in lines if _ERROR_LINE.match(line)]
        if errors:
            excerpt = [errors[-1], *lines[-max_lines:]] if len(lines) > max_lines else lines
    return "\n".join([line for line in lead if line not in excerpt] + excerpt)


def failure_message(code: int, argv: list[str], log: Path, start: int = 0) -> str:
    message = f'ExecuteUserScriptError:\nExitCode {code}\nErrorMessage "{error_excerpt(log, start)}"\n'
    message += f'Command "{" ".join(argv)}"'
    if code in (137, -9):
        message += '\nExtraInfo "OutOfMemory: Process killed by SIGKILL (signal 9)"'
    return message
