"""Start the server: a token for this run, `$SHIPYARD_HOME/server.json` (the address and the token, for
the user only), uvicorn on 127.0.0.1 unless told otherwise. Bound elsewhere, every request needs the
token, and the start says so."""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from shipyard.server import auth
from shipyard.store import Store

DEFAULT_PORT = 8765
INFO_FILE = "server.json"


@dataclass(frozen=True)
class ServerPlan:
    host: str
    port: int
    token: str
    info_path: Path

    @property
    def loopback(self) -> bool:
        return auth.is_loopback(self.host)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def info(self) -> dict:
        return {"url": self.url, "token": self.token, "pid": os.getpid()}


def plan(host: str, port: int, token: str | None, store: Store) -> ServerPlan:
    from shipyard.errors import ValidationError

    if not 0 <= port < 65536:
        raise ValidationError("--port", port, "must be 1-65535, or 0 for any free port")
    if token is not None and len(token) < 16:
        raise ValidationError("--token", "(hidden)", "must be at least 16 characters; leave it out to get a random one")
    return ServerPlan(host, port, token or auth.new_token(), store.home / INFO_FILE)


def warnings_for(plan: ServerPlan) -> list[str]:
    if plan.loopback:
        return []
    return [f"warning: listening on {plan.host}, reachable from other machines: every request needs the token, "
            "and traffic is not encrypted (put it behind TLS)"]


def write_info(plan: ServerPlan) -> None:
    """server.json, created readable by the user only (never widened after the fact: opened with 0600)."""
    tmp = plan.info_path.with_name(f".{plan.info_path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(plan.info(), f, indent=2)
    os.replace(tmp, plan.info_path)


def remove_info(plan: ServerPlan) -> None:
    """On the way out, when server.json is still this run's."""
    try:
        if json.loads(plan.info_path.read_text()).get("token") == plan.token:
            plan.info_path.unlink()
    except (OSError, ValueError):
        pass


def serve(plan: ServerPlan, store: Store, say=print) -> None:
    import uvicorn

    from shipyard.server.app import create_app

    app = create_app(store, plan.token, loopback=plan.loopback)
    for warning in warnings_for(plan):
        print(warning, file=sys.stderr, flush=True)
    config = uvicorn.Config(app, host=plan.host, port=plan.port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    config.load()
    sock = config.bind_socket()   # bound before the address is announced, so it is in use already
    plan = replace(plan, port=sock.getsockname()[1])   # --port 0: the one the system gave
    write_info(plan)
    say(f"shipyard server on {plan.url}  (API docs {plan.url}/docs)")
    say(f"token: {plan.token}")
    say(f"dashboard: {plan.url}/#token={plan.token}")
    say(f"address and token in {plan.info_path}; Ctrl-C stops the server (jobs keep running)")
    sys.stdout.flush()
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again for the handler it found:
    # this one ends the process through `finally`, so server.json goes with the server.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _exit)
    try:
        server.run(sockets=[sock])
    finally:
        remove_info(plan)


def _exit(signum, frame) -> None:
    raise SystemExit(0)
