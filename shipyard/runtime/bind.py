"""torch's TCPStore server, the store behind torchrun's rendezvous and init_process_group's env:// and
tcp://, listens on every interface of the machine (pytorch#173909), where anyone who can reach the
machine can read and write the job's store. Installed by the injected sitecustomize in every Python
process of a job, this binds the listening socket itself, to the address the store's clients connect
to, and hands it to the store (`master_listen_fd`).

That address is where the store's host name resolves to, taken only when it is a loopback address or
this instance's own (SHIPYARD_BIND_ADDRESS, set by the agent): an instance never listens on an address
that is not its own to share. A store on any other host name keeps torch's own listener."""

from __future__ import annotations

import ipaddress
import os
import socket

ENV = "SHIPYARD_BIND_ADDRESS"
# TCPStore.__init__'s parameters in order (torch 2.x), so positional arguments can be named.
_PARAMETERS = ("host_name", "port", "world_size", "is_master", "timeout", "wait_for_workers", "multi_tenant",
               "master_listen_fd", "use_libuv")


def listen_address(host_name: str, instance_address: str) -> tuple[socket.AddressFamily, str] | None:
    """(family, address) a store server for clients of host_name listens on, or None: torch's default."""
    try:
        found = socket.getaddrinfo(host_name, None, type=socket.SOCK_STREAM)
    except OSError:
        return None  # torch reports a name that does not resolve as it always has
    for family, _, _, _, sockaddr in found:
        address = sockaddr[0]
        if address == instance_address or ipaddress.ip_address(address).is_loopback:
            return family, address
    return None


def _bind_store_server(arguments: dict, instance_address: str) -> dict:
    """The store's arguments, with a socket listening where its clients connect when it is to serve."""
    if not arguments.get("is_master") or arguments.get("master_listen_fd") is not None:
        return arguments
    where = listen_address(arguments["host_name"], instance_address)
    if where is None:
        return arguments
    family, address = where
    try:
        server = socket.create_server((address, arguments["port"]), family=family)
    except OSError:
        return arguments  # e.g. the port is taken: torch fails (or retries) with its own error
    # The store owns the descriptor from here; port 0 asked for any port, the one given is passed on.
    return {**arguments, "port": server.getsockname()[1], "master_listen_fd": server.detach()}


def _wrap_tcp_store() -> None:
    import torch.distributed as dist

    store = getattr(dist, "TCPStore", None)
    if store is None:  # torch built without distributed support
        return
    original, instance_address = store.__init__, os.environ[ENV]

    # Patched on the class itself so that every module holding a reference to it is covered.
    def __init__(self, *args, **kwargs):
        original(self, **_bind_store_server({**dict(zip(_PARAMETERS, args)), **kwargs}, instance_address))

    store.__init__ = __init__


def install() -> None:
    from shipyard.runtime.import_hooks import after_import

    after_import("torch.distributed", _wrap_tcp_store)
