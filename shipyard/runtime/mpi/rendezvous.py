"""Where the leader's mpirun and the workers meet: files in the leader's `<job dir>/mpi/<session>/` (the
sandbox binds the job's own directory read-write, backends/sandbox.py), which mpi.rsh and mpi.leader use
on the leader and the workers reach through the leader's mailbox (mpi.mailbox), wherever they run. The
session is the attempt's rendezvous port, so a later attempt never reads an earlier one's requests.

    <host>/<id>.json     mpi.rsh -> that host's mpi.worker: start this command (the `orted` mpirun wants)
    <host>/<id>.exit     mpi.worker -> mpi.rsh: it ended, with this exit code
    <host>/<id>.cancel   mpi.rsh -> mpi.worker: mpirun gave up on it; stop it
    done                 mpi.leader -> every worker: mpirun exited, with this code

Every file is written whole (a temporary name, then rename), so a reader never sees half of one."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path

POLL_SECONDS = 0.1


def _write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _read(path: Path) -> object | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


class Rendezvous:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @classmethod
    def of_instance(cls, instance_dir: str | Path, session: str) -> Rendezvous:
        """The local backend lays instances out as `<job dir>/instances/<name>`."""
        return cls(Path(instance_dir).parent.parent / "mpi" / session)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Rendezvous:
        """The one every process of an mpi job finds from its environment (the agent's and the launcher's)."""
        return cls.of_instance(environ["SHIPYARD_INSTANCE_DIR"], environ["MASTER_PORT"])

    # -- mpi.rsh --------------------------------------------------------------------------------
    def request(self, host: str, command: list[str]) -> str:
        request_id = uuid.uuid4().hex
        _write(self.root / host / f"{request_id}.json", {"command": command})
        return request_id

    def exit_code(self, host: str, request_id: str) -> int | None:
        code = _read(self.root / host / f"{request_id}.exit")
        return None if code is None else int(code)

    def cancel(self, host: str, request_id: str) -> None:
        _write(self.root / host / f"{request_id}.cancel", True)

    # -- mpi.worker -----------------------------------------------------------------------------
    def requests(self, host: str) -> dict[str, list[str]]:
        """Every request for this host so far, by id."""
        inbox = self.root / host
        found = {}
        for path in inbox.glob("*.json") if inbox.is_dir() else ():
            data = _read(path)
            if data is not None:
                found[path.stem] = data["command"]
        return found

    def cancelled(self, host: str, request_id: str) -> bool:
        return (self.root / host / f"{request_id}.cancel").exists()

    def report_exit(self, host: str, request_id: str, code: int) -> None:
        _write(self.root / host / f"{request_id}.exit", code)

    # -- mpi.leader -----------------------------------------------------------------------------
    def finish(self, code: int) -> None:
        _write(self.root / "done", code)

    def finished(self) -> int | None:
        code = _read(self.root / "done")
        return None if code is None else int(code)
