"""The workers' side of the rendezvous (mpi.rendezvous) over the network, for instances that do not share
the leader's files (Ray nodes; on one machine the same way): the leader's `mpi.leader` serves the
requests for each host, their cancellations, the workers' exit reports and the final "done" from its own
files, and every worker asks with a MailboxClient, which has Rendezvous's worker-side methods. Requests
are only ever made on the leader (mpi.rsh writes them there): nothing reaching the mailbox can ask a
worker to run a command.

JSON over HTTP on the leader's own address (SHIPYARD_BIND_ADDRESS), at a port of the job's span
(launchers/mpi.py). Both directions are signed with the job's secret (SECRET_ENV, which the job's
instances inherit from its controller): a request without the secret's signature is refused, and a
worker trusts only an answer signed for its request, so the secret itself never crosses the network."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import socket
import socketserver
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from shipyard.runtime.mpi import PORT_ENV, SECRET_ENV
from shipyard.runtime.mpi.rendezvous import Rendezvous

SIGNATURE_HEADER = "X-Shipyard-Signature"
REQUEST_SECONDS = 10.0   # one call's wait for its answer
# How long a worker keeps trying a leader that does not answer: before its first answer (the leader's
# instance may still be downloading its code and installing requirements), and once it has answered.
START_SECONDS = 600.0
LOST_SECONDS = 60.0
RETRY_SECONDS = 0.5
MAX_BODY = 1 << 20
_REQUEST_ID = re.compile(r"[0-9a-f]{32}")   # Rendezvous.request's uuid4().hex
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # never through an HTTP(S)_PROXY


class MailboxError(Exception):
    """The leader's mailbox cannot be used: not reached in time, or it refused this worker."""


def _signature(secret: str, *parts: bytes) -> str:
    return hmac.new(secret.encode(), b"\0".join(parts), hashlib.sha256).hexdigest()


class MailboxServer(ThreadingHTTPServer):
    """Serves `rendezvous` to the workers `hosts` on (address, port) until shut down."""

    daemon_threads = True

    def __init__(self, rendezvous: Rendezvous, address: str, port: int, secret: str, hosts: list[str]) -> None:
        self.rendezvous, self.secret, self.hosts = rendezvous, secret, set(hosts)
        self.told: set[str] = set()   # workers that have been told mpirun is done
        self.changed = threading.Condition()
        super().__init__((address, port), _Handler)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)   # HTTPServer's also looks up its name, which may wait on DNS

    def call(self, host: str, name: str, args: dict) -> object:
        """One worker's call, its arguments checked: they name files of the rendezvous."""
        if host not in self.hosts:
            raise ValueError(f"not a worker of this job: {host!r}")
        request_id = args.get("request_id")
        if name in ("cancelled", "report_exit") and not _REQUEST_ID.fullmatch(str(request_id)):
            raise ValueError(f"not a request id: {request_id!r}")
        if name == "requests":
            return self.rendezvous.requests(host)
        if name == "cancelled":
            return self.rendezvous.cancelled(host, request_id)
        if name == "report_exit":
            self.rendezvous.report_exit(host, request_id, int(args["code"]))
            return None
        if name == "finished":
            return self.rendezvous.finished()
        raise ValueError(f"no such call: {name!r}")

    def answered(self, host: str, name: str, result: object) -> None:
        """After the answer is written: a worker told mpirun is done (the leader may exit once all are;
        marked before, it exited while an answer was still being written, and the worker failed)."""
        if name == "finished" and result is not None:
            with self.changed:
                self.told.add(host)
                self.changed.notify_all()

    def wait_told(self, timeout: float) -> set[str]:
        """Wait (at most timeout) until every worker has been told mpirun is done; those not told."""
        with self.changed:
            self.changed.wait_for(lambda: self.told >= self.hosts, timeout)
            return self.hosts - self.told


class _Handler(BaseHTTPRequestHandler):
    server: MailboxServer

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 <= length <= MAX_BODY:
            self.send_error(413)
            return
        body = self.rfile.read(length)
        nonce, _, signature = (self.headers.get(SIGNATURE_HEADER) or "").partition(" ")
        if not hmac.compare_digest(signature, _signature(self.server.secret, b"request", nonce.encode(), body)):
            self._answer(403, {"error": "not signed with this job's secret"}, nonce)
            return
        try:
            call = json.loads(body)
            result = self.server.call(call["host"], call["call"], call.get("args", {}))
        except (ValueError, KeyError, TypeError) as exc:
            self._answer(400, {"error": str(exc)}, nonce)
            return
        self._answer(200, {"result": result}, nonce)
        self.server.answered(call["host"], call["call"], result)

    def _answer(self, status: int, data: dict, nonce: str) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header(SIGNATURE_HEADER, _signature(self.server.secret, b"answer", nonce.encode(),
                                                      str(status).encode(), body))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:
        pass   # every poll would be a line of the leader's log


class MailboxClient:
    """Rendezvous's worker-side methods, asked of the leader's mailbox as worker `host`. A call that finds
    the leader unreachable tries again, for START_SECONDS until the leader has answered once, then for
    LOST_SECONDS; a refusal is final."""

    def __init__(self, leader: str, port: int, secret: str, host: str, start_seconds: float = START_SECONDS,
                 lost_seconds: float = LOST_SECONDS) -> None:
        self.leader, self.port, self.secret, self.host = leader, port, secret, host
        self.url = f"http://{leader}:{port}/"
        self.wait_seconds, self.lost_seconds = start_seconds, lost_seconds
        self.answered_at = time.monotonic()   # until the first answer: when this worker began to wait

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> MailboxClient:
        return cls(environ["MASTER_ADDR"], int(environ[PORT_ENV]), environ[SECRET_ENV], environ["SM_CURRENT_HOST"])

    @property
    def where(self) -> str:
        try:
            address = socket.gethostbyname(self.leader)
        except OSError:
            address = "an address it does not resolve to"
        return f"the mpi leader {self.leader} at {address}:{self.port}"

    def requests(self, host: str) -> dict[str, list[str]]:
        return self._call(host, "requests")

    def cancelled(self, host: str, request_id: str) -> bool:
        return self._call(host, "cancelled", request_id=request_id)

    def report_exit(self, host: str, request_id: str, code: int) -> None:
        self._call(host, "report_exit", request_id=request_id, code=code)

    def finished(self) -> int | None:
        return self._call(self.host, "finished")

    def _call(self, host: str, name: str, **args) -> object:
        body = json.dumps({"host": host, "call": name, "args": args}).encode()
        while True:
            nonce = secrets.token_hex(16)
            request = urllib.request.Request(self.url, data=body, method="POST", headers={
                "Content-Type": "application/json",
                SIGNATURE_HEADER: f"{nonce} {_signature(self.secret, b'request', nonce.encode(), body)}"})
            try:
                with _OPENER.open(request, timeout=REQUEST_SECONDS) as response:
                    return self._result(nonce, response.status, response.headers, response.read())
            except urllib.error.HTTPError as refused:
                self._result(nonce, refused.code, refused.headers, refused.read())
            except (urllib.error.URLError, OSError) as exc:   # not reached (yet): not up, gone, or the network
                if time.monotonic() - self.answered_at >= self.wait_seconds:
                    reason = getattr(exc, "reason", exc)
                    raise MailboxError(f"could not reach {self.where} for {self.wait_seconds:g}s: {reason}") from None
                time.sleep(RETRY_SECONDS)

    def _result(self, nonce: str, status: int, headers, body: bytes) -> object:
        """The answer's result, once it is known to come from this job's leader."""
        expected = _signature(self.secret, b"answer", nonce.encode(), str(status).encode(), body)
        if not hmac.compare_digest(headers.get(SIGNATURE_HEADER) or "", expected):
            raise MailboxError(f"{self.where} answered {self.host} (status {status}) without this job's secret: "
                               "another process listens on its port, or this instance has another job's secret")
        data = json.loads(body)
        if status != 200:
            raise MailboxError(f"{self.where} refused {self.host}'s call (status {status}): {data.get('error')}")
        self.answered_at, self.wait_seconds = time.monotonic(), self.lost_seconds
        return data["result"]
