"""Choosing a job's rendezvous ports on the machine whose processes will bind them: the controller's
for local instances, algo-1's node for a Ray job (backends/ray: the port is chosen there once the
instances are placed)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from shipyard.errors import ShipyardError

# Bases tried before giving up on finding `span` free ports in a row.
PORT_TRIES = 50
# Job ports come from below the kernel's ephemeral range: no outgoing connection and no bind(0) takes
# one, so a port found free stays free until the job's processes bind it seconds later (one from
# bind(0) could be taken in between by any connection this machine opens: S3, Ray, ...).
JOB_PORTS_FROM = 20000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_ports = random.SystemRandom()  # not the random module's state, which a seed makes repeat in every process


def free_port(span: int = 1) -> int:
    """A base port with base .. base + span - 1 all free now (TensorFlow's tasks take the ports above
    the job's master_port, see tf_config)."""
    for _ in range(PORT_TRIES):
        base = _candidate_port(span)
        if base + span <= 65536 and all(_bindable(port) for port in range(base, base + span)):
            return base
    raise ShipyardError(f"no {span} free ports in a row found on this machine after {PORT_TRIES} tries")


def _candidate_port(span: int) -> int:
    try:
        ephemeral = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768  # Linux's default
    if ephemeral - span > JOB_PORTS_FROM:
        return _ports.randrange(JOB_PORTS_FROM, ephemeral - span + 1)
    with socket.socket() as s:  # no room below the ephemeral range: let the kernel pick
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bindable(port: int) -> bool:
    # The wildcard address, as TensorFlow's servers bind it: taken on any interface means taken.
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True
