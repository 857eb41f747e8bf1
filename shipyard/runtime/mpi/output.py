"""Reading mpirun's output as it streams by (pure, line by line):

- the job map (`--display-map`) says which host runs each rank;
- `--tag-output` tags `[1,R]<stdout>:` are rewritten as the toolkit does, `[1,mpirank:R,algo-K]<stdout>:`,
  so every line names its host; only the tag mpirun puts at the start of a line, never text of the
  rank's own that looks like one;
- the rank that failed first is the one mpirun names (MPI_ABORT, a non-zero exit, a signal), else the
  first rank that printed a traceback; the excerpt of its lines (runtime/failure.py) makes the failure
  message."""

from __future__ import annotations

import re
from collections import defaultdict, deque

from shipyard.runtime.failure import excerpt

_NODE = re.compile(r"Data for node: (\S+)")
_MAPPED_RANK = re.compile(r"Process OMPI jobid: \[\d+,\d+\] App: \d+ Process rank: (\d+)")
_TAG = re.compile(r"\[(\d+),(\d+)\]<(stdout|stderr|stddiag)>:")
_FAILED_RANK = (
    re.compile(r"MPI_ABORT was invoked on rank (\d+)"),
    re.compile(r"Process name: \[\[\d+,\d+\],(\d+)\]"),
    re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal"),
)
_TRACEBACK = "Traceback (most recent call last)"
_KEPT_LINES = 200


class MpiOutput:
    def __init__(self) -> None:
        self.hosts: dict[int, str] = {}                 # rank -> host, from the job map
        self._node: str | None = None
        self.lines: dict[int, deque[str]] = defaultdict(lambda: deque(maxlen=_KEPT_LINES))
        self.failed_rank: int | None = None
        self._first_traceback: int | None = None

    def feed(self, line: str) -> str:
        """Take one line of mpirun's output; return it as it should be logged."""
        if node := _NODE.search(line):
            self._node = node.group(1)
        elif (mapped := _MAPPED_RANK.search(line)) and self._node:
            self.hosts[int(mapped.group(1))] = self._node
        tag = _TAG.match(line)
        if tag:
            rank = int(tag.group(2))
            text = line[tag.end():]
            self.lines[rank].append(text)
            if text.startswith(_TRACEBACK) and self._first_traceback is None:
                self._first_traceback = rank
            return self._retag(tag) + text
        if self.failed_rank is None:
            for pattern in _FAILED_RANK:
                if found := pattern.search(line):
                    self.failed_rank = int(found.group(1))
                    break
        return line

    def _retag(self, tag: re.Match) -> str:
        job, rank, stream = tag.groups()
        host = self.hosts.get(int(rank))
        return f"[{job},mpirank:{rank},{host}]<{stream}>:" if host else tag.group(0)

    def culprit(self) -> int | None:
        return self.failed_rank if self.failed_rank is not None else self._first_traceback

    def failure(self, code: int, argv: list[str]) -> str | None:
        """The toolkit's ExecuteUserScriptError naming the rank and host that failed first, or None when
        no rank is to blame (mpirun itself failed: its own output says why)."""
        rank = self.culprit()
        if rank is None:
            return None
        host = self.hosts.get(rank, "an unknown host")
        error = f"MPI rank {rank} on {host} failed first:\n{excerpt(list(self.lines.get(rank, ())))}"
        return f'ExecuteUserScriptError:\nExitCode {code}\nErrorMessage "{error}"\nCommand "{" ".join(argv)}"'
