"""Rule actions for real: a webhook POSTed to a server on 127.0.0.1, a command run from its argv with the
finding on stdin (never through a shell), StopTraining as a stop request naming the rule, and a failing
notification reported without stopping the others."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from shipyard.rules.actions import run_actions
from shipyard.spec.rules import NotifyCommand, NotifyWebhook, StopTraining

FINDING = {"job": "job-1", "rule": "LossNotDecreasing", "step": 30,
           "message": "Evaluation of the rule LossNotDecreasing at step 30 resulted in the condition being met",
           "finding": "tensor CrossEntropyLoss_output_0: ..."}


class Receiver(BaseHTTPRequestHandler):
    bodies: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        length = int(self.headers["Content-Length"])
        Receiver.bodies.append((self.headers["Content-Type"], json.loads(self.rfile.read(length))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_args):
        pass


def test_webhook_command_and_stop_each_carry_the_finding(tmp_path):
    server = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    out = tmp_path / "stdin.json"
    # shell metacharacters in an argument stay literal: no shell ever sees the argv
    writer = f"import sys; open({str(out)!r}, 'wb').write(sys.stdin.buffer.read()); print(sys.argv[1])"
    failures: list[str] = []
    try:
        stop = run_actions(
            (NotifyWebhook(url=f"http://127.0.0.1:{server.server_port}/hook"),
             NotifyCommand(argv=(sys.executable, "-c", writer, "$(touch pwned); `x`")),
             StopTraining()),
            FINDING, failures.append)
    finally:
        server.shutdown()
    assert failures == []
    assert Receiver.bodies == [("application/json", FINDING)]
    assert json.loads(out.read_text()) == FINDING
    assert not (tmp_path / "pwned").exists()
    assert stop is not None and stop.message.startswith("Stopped by rule LossNotDecreasing: Evaluation of the rule")


def test_a_failing_notification_is_reported_and_the_rest_still_run(tmp_path):
    failures: list[str] = []
    stop = run_actions(
        (NotifyWebhook(url="http://127.0.0.1:9/nobody-listens"),
         NotifyCommand(argv=(sys.executable, "-c", "raise SystemExit(3)")),
         StopTraining()),
        FINDING, failures.append)
    assert len(failures) == 2
    assert failures[0].startswith("rule LossNotDecreasing: action notify_webhook failed:")
    assert "action notify_command failed" in failures[1] and "exit status 3" in failures[1]
    assert stop is not None
