"""The leader instance's part in an `mpi` job: `python -m shipyard.runtime.mpi.leader mpirun ...` runs the
launcher's mpirun command (the toolkit's MasterRunner, without sshd) and

- gives it a private temporary directory (OpenMPI's session directories and shared-memory files): a
  sandbox's own /tmp already is, but instances without a sandbox share this machine's, and mpirun's job
  id comes from its host name and PID, so concurrent jobs could otherwise use the same files;
- relays its output to this host's log with the toolkit's `[1,mpirank:R,algo-K]` tags (mpi.output);
- on failure writes /opt/ml/output/failure naming the rank and host that failed first;
- serves the workers their side of the rendezvous (mpi.mailbox, on this instance's address) and tells
  every worker that mpirun is done, so their instances exit;
- exits with mpirun's exit code, the job's outcome."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from shipyard.runtime.mpi import PORT_ENV, SECRET_ENV
from shipyard.runtime.mpi.mailbox import MailboxServer
from shipyard.runtime.mpi.output import MpiOutput
from shipyard.runtime.mpi.rendezvous import Rendezvous

# After mpirun is done, how long the mailbox waits for the workers that have not been told yet.
TELL_SECONDS = 10.0


def write_failure(message: str) -> None:
    """As the toolkit does: the first failure written wins."""
    path = Path(os.environ["SM_OUTPUT_DIR"]) / "failure"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(message)


def serve(rendezvous: Rendezvous) -> MailboxServer:
    """The workers' mailbox, answering in a thread of its own."""
    address, port = os.environ["SHIPYARD_BIND_ADDRESS"], int(os.environ[PORT_ENV])
    workers = [host for host in json.loads(os.environ["SM_HOSTS"]) if host != os.environ["SM_CURRENT_HOST"]]
    try:
        server = MailboxServer(rendezvous, address, port, os.environ[SECRET_ENV], workers)
    except OSError as exc:
        raise SystemExit(f"shipyard mpi: cannot listen for the workers on {address}:{port}: {exc}") from None
    threading.Thread(target=server.serve_forever, name="mpi-mailbox", daemon=True).start()
    return server


def run(argv: list[str]) -> int:
    rendezvous = Rendezvous.from_environment()
    mailbox = serve(rendezvous)
    scratch = tempfile.mkdtemp(prefix="shipyard-mpi-")  # short: OpenMPI puts Unix sockets under it
    env = {**os.environ, "OMPI_MCA_orte_tmpdir_base": scratch, "OMPI_MCA_btl_vader_backing_directory": scratch}
    output = MpiOutput()
    try:
        process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT)
    except OSError as exc:
        print(f"shipyard mpi: cannot run {argv[0]}: {exc}", file=sys.stderr, flush=True)
        finish(rendezvous, mailbox, 127)
        return 127

    def forward(signum, frame) -> None:  # mpirun stops its ranks; its output keeps flowing to the end
        process.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    try:
        out = sys.stdout.buffer
        for raw in process.stdout:
            line = raw.decode(errors="replace")
            out.write(output.feed(line.rstrip("\n")).encode() + (b"\n" if line.endswith("\n") else b""))
            out.flush()
    finally:
        code = process.wait()
        code = 128 - code if code < 0 else code  # killed by a signal: the shell's convention
        finish(rendezvous, mailbox, code)
        shutil.rmtree(scratch, ignore_errors=True)
    if code != 0 and (message := output.failure(code, argv)):
        write_failure(message)
    return code


def finish(rendezvous: Rendezvous, mailbox: MailboxServer, code: int) -> None:
    """Say mpirun is done, and serve until every worker has heard it (or TELL_SECONDS)."""
    rendezvous.finish(code)
    if untold := mailbox.wait_told(TELL_SECONDS):
        print(f"shipyard mpi: {', '.join(sorted(untold))} did not ask whether mpirun was done within "
              f"{TELL_SECONDS:g}s", file=sys.stderr, flush=True)
    mailbox.shutdown()
    mailbox.server_close()


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: python -m shipyard.runtime.mpi.leader MPIRUN_COMMAND...", file=sys.stderr)
        return 2
    return run(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
