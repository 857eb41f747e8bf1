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


def test_sagemakers_action_list_with_email_and_sms(monkeypatch):
    """Issue 22, as SageMaker's documentation writes it; Email goes through a real SMTP server (aiosmtpd on
    127.0.0.1), SMS is POSTed to the configured gateway."""
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Message

    from shipyard.debugger import Rule, rule_configs

    received = []

    class Inbox(Message):
        def handle_message(self, message):
            received.append(message)

    import socket

    with socket.socket() as probe:   # aiosmtpd checks it listens by connecting: a real port, not 0
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    smtp = Controller(Inbox(), hostname="127.0.0.1", port=port)
    smtp.start()
    gateway = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=gateway.serve_forever, daemon=True).start()
    Receiver.bodies = []
    monkeypatch.setenv("SHIPYARD_SMTP_URL", f"smtp://127.0.0.1:{port}")
    monkeypatch.setenv("SHIPYARD_NOTIFY_FROM", "rules@shipyard.test")
    monkeypatch.setenv("SHIPYARD_SMS_WEBHOOK_URL", f"http://127.0.0.1:{gateway.server_port}/sms")
    try:
        rule = Rule.sagemaker(rule_configs.vanishing_gradient(), actions=rule_configs.ActionList(
            rule_configs.StopTraining(), rule_configs.Email("a@b.c"), rule_configs.SMS("+15555550100")))
        assert [a.type for a in rule.actions] == ["stop_training", "email", "sms"]
        failures: list[str] = []
        stop = run_actions(rule.actions, FINDING, failures.append)
    finally:
        smtp.stop()
        gateway.shutdown()
    assert failures == [] and stop is not None
    (mail,) = received
    assert (mail["From"], mail["To"]) == ("rules@shipyard.test", "a@b.c")
    assert mail["Subject"] == "shipyard: rule LossNotDecreasing fired on job job-1"
    assert "Evaluation of the rule LossNotDecreasing at step 30" in mail.get_payload()
    ((kind, sms),) = Receiver.bodies
    assert kind == "application/json" and sms["phone_number"] == "+15555550100"
    assert sms["message"].startswith("shipyard job job-1: rule LossNotDecreasing: Evaluation of the rule")


def test_email_and_sms_need_their_server_before_the_job_runs(monkeypatch):
    import pytest

    from shipyard.debugger import Rule, rule_configs
    from shipyard.errors import ValidationError

    monkeypatch.delenv("SHIPYARD_SMTP_URL", raising=False)
    monkeypatch.delenv("SHIPYARD_SMS_WEBHOOK_URL", raising=False)
    with pytest.raises(ValidationError, match="sending email needs SHIPYARD_SMTP_URL; set it"):
        Rule.sagemaker(rule_configs.vanishing_gradient(), actions=rule_configs.Email("a@b.c"))
    with pytest.raises(ValidationError, match="sending sms needs SHIPYARD_SMS_WEBHOOK_URL"):
        Rule.sagemaker(rule_configs.vanishing_gradient(), actions=[rule_configs.SMS("+15555550100")])
    with pytest.raises(ValidationError, match="email_address"):
        rule_configs.Email("not an address")
    with pytest.raises(ValidationError, match="training_job_prefix='other-'"):
        rule_configs.StopTraining("other-")
