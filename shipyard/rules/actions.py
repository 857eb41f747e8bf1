"""What a rule does when its condition is met, beyond its status: StopTraining (a StopRequest for the
controller) and notifications: SageMaker's Email (through the user's SMTP server) and SMS (POSTed to the
user's SMS gateway), a webhook POST, or a command run from an argv list, never a shell. A notification
that fails is reported, never raised."""

from __future__ import annotations

import json
import smtplib
import subprocess
import urllib.parse
import urllib.request
from email.message import EmailMessage

from shipyard import settings
from shipyard.control.watchers import StopRequest

NOTIFY_TIMEOUT = 10.0


def run_actions(actions, finding: dict, report) -> StopRequest | None:
    """finding: {"job", "rule", "step", "message"}; report(text) records a failure."""
    stop = None
    body = json.dumps(finding).encode()
    for action in actions:
        try:
            if action.type == "stop_training":
                stop = StopRequest(f"Stopped by rule {finding['rule']}: {finding['message']}")
            elif action.type == "notify_webhook":
                _post(action.url, body)
            elif action.type == "notify_command":
                subprocess.run(list(action.argv), input=body, timeout=NOTIFY_TIMEOUT, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            elif action.type == "email":
                _email(action.email_address, finding)
            elif action.type == "sms":
                _post(_configured(settings.sms_webhook_url(), "SMS", "SHIPYARD_SMS_WEBHOOK_URL"), json.dumps(
                    {**finding, "phone_number": action.phone_number, "message": _text(finding)}).encode())
        except Exception as exc:
            report(f"rule {finding['rule']}: action {action.type} failed: {exc}")
    return stop


def _post(url: str, body: bytes) -> None:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=NOTIFY_TIMEOUT).close()


def _configured(value: str | None, what: str, variable: str) -> str:
    if not value:
        raise RuntimeError(f"{what} actions need {variable} (docs/debugger.md)")
    return value


def _text(finding: dict) -> str:
    return f"shipyard job {finding['job']}: rule {finding['rule']}: {finding['message']}"


def _email(address: str, finding: dict) -> None:
    """The finding mailed through SHIPYARD_SMTP_URL (smtp:// or smtps://, with user:password@ to log in)."""
    url = urllib.parse.urlsplit(_configured(settings.smtp_url(), "Email", "SHIPYARD_SMTP_URL"))
    message = EmailMessage()
    message["From"], message["To"] = settings.notify_from(), address
    message["Subject"] = f"shipyard: rule {finding['rule']} fired on job {finding['job']}"
    message.set_content(_text(finding) + "\n\n" + json.dumps(finding, indent=2))
    client = smtplib.SMTP_SSL if url.scheme == "smtps" else smtplib.SMTP
    with client(url.hostname, url.port or (465 if url.scheme == "smtps" else 25), timeout=NOTIFY_TIMEOUT) as smtp:
        if url.username:
            smtp.login(urllib.parse.unquote(url.username), urllib.parse.unquote(url.password or ""))
        smtp.send_message(message)
