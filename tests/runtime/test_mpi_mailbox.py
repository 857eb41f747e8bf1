"""The mpi leader's mailbox (runtime/mpi/mailbox.py): the workers' side of the rendezvous over the
network, signed both ways with the job's secret, and what a worker says when it cannot use it."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from shipyard.runtime.mpi.mailbox import MailboxClient, MailboxError, MailboxServer
from shipyard.runtime.mpi.rendezvous import Rendezvous

SECRET = "s3cret"


@contextlib.contextmanager
def serving(rendezvous: Rendezvous, workers: list[str], host: str = "algo-2",
            secret: str = SECRET) -> Iterator[MailboxClient]:
    """A mailbox on 127.0.0.1 serving `rendezvous` to `workers`, and a client for worker `host`."""
    server = MailboxServer(rendezvous, "127.0.0.1", 0, SECRET, workers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield MailboxClient("127.0.0.1", server.server_address[1], secret, host, start_seconds=5, lost_seconds=5)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_worker_sees_the_leaders_files_through_the_mailbox(tmp_path):
    rendezvous = Rendezvous(tmp_path)
    with serving(rendezvous, ["algo-2", "algo-3"]) as client:
        assert client.requests("algo-2") == {} and client.finished() is None
        first = rendezvous.request("algo-2", ["orted", "-mca", "ess", '"env"'])
        rendezvous.request("algo-3", ["orted"])
        assert client.requests("algo-2") == {first: ["orted", "-mca", "ess", '"env"']}
        assert client.cancelled("algo-2", first) is False
        rendezvous.cancel("algo-2", first)
        assert client.cancelled("algo-2", first) is True
        client.report_exit("algo-2", first, 143)
        assert rendezvous.exit_code("algo-2", first) == 143
        rendezvous.finish(0)
        assert client.finished() == 0


def test_the_leader_serves_until_every_worker_was_told_it_is_done(tmp_path):
    rendezvous = Rendezvous(tmp_path)
    server = MailboxServer(rendezvous, "127.0.0.1", 0, SECRET, ["algo-2", "algo-3"])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        rendezvous.finish(1)
        MailboxClient("127.0.0.1", server.server_address[1], SECRET, "algo-2").finished()
        assert server.wait_told(1) == {"algo-3"}   # algo-2 marked just after its answer
        MailboxClient("127.0.0.1", server.server_address[1], SECRET, "algo-3").finished()
        assert server.wait_told(5) == set()
    finally:
        server.shutdown()
        server.server_close()


def test_a_call_without_the_jobs_secret_is_refused(tmp_path):
    rendezvous = Rendezvous(tmp_path)
    rendezvous.request("algo-2", ["orted"])
    with serving(rendezvous, ["algo-2"], secret="another job's") as client:
        with pytest.raises(MailboxError, match="without this job's secret"):
            client.requests("algo-2")


@pytest.mark.parametrize(("host", "call"), [
    ("algo-9", lambda c: c.requests("algo-9")),                          # not a worker of the job
    ("algo-2", lambda c: c.report_exit("algo-2", "../../escape", 0)),    # not a request id: never a path
])
def test_calls_naming_other_files_are_refused(tmp_path, host, call):
    with serving(Rendezvous(tmp_path / "mpi"), ["algo-2"], host=host) as client:
        with pytest.raises(MailboxError, match=r"refused .*\(status 400\)"):
            call(client)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_answer_not_signed_with_the_secret_is_not_trusted():
    class Impostor(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = b'{"result": {"0123": ["sh", "-c", "evil"]}}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Impostor)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = MailboxClient("127.0.0.1", server.server_address[1], SECRET, "algo-2")
        with pytest.raises(MailboxError, match="another process listens on its port"):
            client.requests("algo-2")
    finally:
        server.shutdown()
        server.server_close()


def test_an_unreachable_leader_fails_the_worker_naming_it_after_a_bounded_wait():
    with socket.socket() as s:   # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = MailboxClient("localhost", port, SECRET, "algo-2", start_seconds=1)
    started = time.monotonic()
    with pytest.raises(MailboxError) as error:
        client.finished()
    assert 1 <= time.monotonic() - started < 5
    assert str(error.value).startswith(f"could not reach the mpi leader localhost at 127.0.0.1:{port} for 1s: ")
    assert "refused" in str(error.value)
