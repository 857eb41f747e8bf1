"""The toolkit's failure message for a script that exited non-zero:

    ExecuteUserScriptError:
    ExitCode N
    ErrorMessage "<the error the script printed>"
    Command "<argv>"

The error is an excerpt of the host's log that names what went wrong whatever a framework printed
around it: the user's exception line first, then the traceback's frames that matter (the user's own
and the innermost); without a traceback, the last lines. Framework logging (TensorFlow's absl lines,
torch's C++ warnings, NCCL's info) is left out, and the excerpt fits the job's FailureReason, which is
cut at 1024 characters. torchrun's `[rankN]: ` lines are read per rank; the rank that failed for its
own reason leads, not one whose collective broke because a peer went away."""

from __future__ import annotations

import re
from pathlib import Path

_TAIL_BYTES = 16384
# Characters of the excerpt: FailureReason keeps 1024, and its prefix, the wrapper above and the
# command take the rest. What matters comes first, so a cut loses the least.
BUDGET = 760
_ERROR_LINE = re.compile(r"^(\w+\.)*\w*(Error|Exception|Interrupt)\b")
_TRACEBACK = "Traceback (most recent call last):"
_ROOT_CAUSE = "Root Cause (first observed failure):"
# torchrun prints each rank's output with these prefixes (the `--tee` label of a host of several processes,
# runtime/launchers/torchrun.py, then its rank prefix), then its own traceback, which says only that a
# child failed.
_RANK_PREFIX = re.compile(r"^(?:[\w.-]+\[\d+\] \| )?(?:\[rank\d+\]: )?")
# Logging that frameworks print before and between a script's own lines: glog/absl (TensorFlow, torchrun:
# "I0000 00:00:1795530313.878005 4 port.cc:153] ..."), absl's start-up notice, TensorFlow's C++ lines
# ("2026-11-24 14:25:13.009: I tensorflow/core/...cc:113] ..."), torch's C++ warnings
# ("[W1124 14:25:13.009 ProcessGroupGloo.cpp:...] ..."), NCCL's ("host:12:34 [0] NCCL INFO ...").
_NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\)"
    r"|[IWEF]\d{4} \d\d:\d\d:\d\d[.\d]*( +\d+)? \S+:\d+\]"
    r"|\[[IWEF]\d{4} \d\d:\d\d:\d\d[.\d]*[^\]]*\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.\d]*: [IWEF] \S+:\d+\]"
    r"|\S+:\d+:\d+ \[\d+\] NCCL (INFO|WARN))"
)
_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", '"<frozen ')
# What a rank's error says when it failed only because a peer went away (its collective broke).
PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "remote process exited")


def _peer_lost(line: str) -> bool:
    return any(text in line for text in PEER_LOST)


def _text(line: str) -> str:
    """A line without torchrun's rank prefix."""
    return _RANK_PREFIX.sub("", line, count=1)


def _prefix(line: str) -> str:
    found = _RANK_PREFIX.match(line)
    return found.group(0) if found else ""


def error_message(message: str) -> str:
    """The ErrorMessage of a failure message (the excerpt), or the whole message without one."""
    return message.split('ErrorMessage "', 1)[-1].split('"\nCommand "', 1)[0]


def only_peer_lost(message: str) -> bool:
    """Whether a failure message's error (the first exception line of its ErrorMessage) says only that a
    peer went away."""
    for line in error_message(message).splitlines():
        if _ERROR_LINE.match(_text(line)):
            return _peer_lost(line)
    return False


def _last_traceback(lines: list[str]) -> tuple[list[str], list[list[str]], list[str]] | None:
    """The last traceback of one process's lines: its header, its frames (a `File` line with the source
    lines under it) and its exception lines (the exception and what follows it), or None."""
    starts = [i for i, line in enumerate(lines) if _text(line).startswith(_TRACEBACK)]
    if not starts:
        return None
    header, *rest = lines[starts[-1]:]
    frames: list[list[str]] = []
    for i, line in enumerate(rest):
        text = _text(line)
        if text.startswith("  File "):
            frames.append([line])
        elif text.startswith("    ") and frames:
            frames[-1].append(line)
        elif text.strip():
            return [header], frames, rest[i:]
    return [header], frames, []


def _fits(lines: list[str], budget: int) -> bool:
    return sum(len(line) + 1 for line in lines) <= budget


def _clip(lines: list[str], budget: int) -> list[str]:
    """The first lines that fit, the last of them cut at the budget."""
    kept: list[str] = []
    for line in lines:
        if budget <= 0:
            break
        kept.append(line[:budget])
        budget -= len(line) + 1
    return kept


def _shown_traceback(traceback: tuple, budget: int) -> list[str]:
    """The whole traceback when it fits; else its exception line first, then the frames that matter
    (the user's code and the innermost one, outer ones dropped first), then the exception lines."""
    header, frames, exception = traceback
    whole = [*header, *(line for frame in frames for line in frame), *exception]
    if _fits(whole, budget) or not exception:
        return _clip(whole, budget)
    lead = exception[:1]
    omitted = [f"{_prefix(header[0])}  ..."]
    matter = [f for i, f in enumerate(frames) if i == len(frames) - 1 or not any(s in f[0] for s in _LIBRARY)]
    # What the frames may take: the rest after the lead, the header, the "..." line and the exception's
    # first lines (a long message's tail may be cut, its first lines not).
    room = budget - sum(len(line) + 1 for line in [*lead, *header, *omitted, *exception[:3]])
    kept: list[list[str]] = []
    for frame in reversed(matter):  # the innermost first: they say where it broke
        if not _fits([line for f in kept for line in f] + frame, room):
            break
        kept.insert(0, frame)
    omitted = omitted if len(kept) < len(frames) else []
    return _clip([*lead, *header, *omitted, *(line for frame in kept for line in frame), *exception], budget)


def _root_cause(lines: list[str]) -> list[str]:
    """torchrun's summary of the rank that failed first, for a rank that left no traceback (killed by a
    signal, aborted): its rank, host and exit code, which its ChildFailedError traceback says nothing of."""
    starts = [i for i, line in enumerate(lines) if line.strip() == _ROOT_CAUSE]
    if not starts:
        return []
    block = []
    for line in lines[starts[-1]:]:
        if line.startswith("====") and block:
            break
        block.append(line)
    return block


def excerpt(lines: list[str], budget: int = BUDGET) -> str:
    """What went wrong, from one host's (or one MPI rank's) last lines of output."""
    lines = [line for line in lines if not _NOISE.match(_text(line))] or lines
    by_rank: dict[str, list[str]] = {}
    for line in lines:
        if prefix := _prefix(line):
            by_rank.setdefault(prefix, []).append(line)
    # The ranks with an error, in the order their errors appear: the first that failed for its own reason
    # decides, else the first.
    errors = [line for line in lines if _prefix(line) and _ERROR_LINE.match(_text(line))]
    ranks = list(dict.fromkeys(_prefix(line) for line in errors))
    own = [_prefix(line) for line in errors if not _peer_lost(line)]
    culprit = own[0] if own else (ranks[0] if ranks else None)
    if culprit and (traceback := _last_traceback(by_rank[culprit])):
        return "\n".join(_shown_traceback(traceback, budget))
    lead = [next(line for line in errors if _prefix(line) == culprit)] if culprit else _root_cause(lines)
    room = budget - sum(len(line) + 1 for line in lead)
    plain = [line for line in lines if not _prefix(line)]
    if traceback := _last_traceback(plain):
        shown = _shown_traceback(traceback, room)
    else:
        rest = [line for line in lines if line not in lead]
        shown = rest[-1:]  # the last lines that fit, at least the last one (cut)
        for line in reversed(rest[:-1]):
            if not _fits([line, *shown], room):
                break
            shown.insert(0, line)
    return "\n".join(_clip([*lead, *shown], budget))


def error_excerpt(log: Path, start: int = 0, budget: int = BUDGET) -> str:
    """The excerpt of a host's log written since byte `start` (only its last 16 KiB are read); empty
    when the instance never wrote one (it died before its first line)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(start, f.seek(0, 2) - _TAIL_BYTES))
            lines = f.read().decode(errors="replace").splitlines()
    except FileNotFoundError:
        return ""
    return excerpt([line for line in lines if " shipyard-agent " not in line], budget)


def failure_message(code: int, argv: list[str], log: Path, start: int = 0) -> str:
    message = f'ExecuteUserScriptError:\nExitCode {code}\nErrorMessage "{error_excerpt(log, start)}"\n'
    message += f'Command "{" ".join(argv)}"'
    if code in (137, -9):
        message += '\nExtraInfo "OutOfMemory: Process killed by SIGKILL (signal 9)"'
    return message
