"""mpirun's remote agent in place of ssh: `python -m shipyard.runtime.mpi.rsh HOST COMMAND...`.

mpirun calls it once per worker instance to start that instance's `orted`. It hands the command to the
instance's mpi.worker (through mpi.rendezvous) and lives as long as that orted does, returning its exit
code, as `ssh host orted ...` would. If mpirun stops it, the orted is stopped too."""

from __future__ import annotations

import signal
import sys
import time

from shipyard.runtime.mpi.rendezvous import POLL_SECONDS, Rendezvous


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m shipyard.runtime.mpi.rsh HOST COMMAND...", file=sys.stderr)
        return 2
    host, command = args[0], args[1:]
    rendezvous = Rendezvous.from_environment()
    request_id = rendezvous.request(host, command)

    def cancel(signum, frame) -> None:
        rendezvous.cancel(host, request_id)
        sys.exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, cancel)
    while (code := rendezvous.exit_code(host, request_id)) is None:
        time.sleep(POLL_SECONDS)
    return code


if __name__ == "__main__":
    sys.exit(main())
