"""What a rule does when its condition is met, beyond its status: StopTraining (a StopRequest for the
controller) and notifications (a webhook POST, or a command run from an argv list, never a shell), in
place of SageMaker's SNS email and SMS. A notification that fails is reported, never raised."""

from __future__ import annotations

import json
import subprocess
import urllib.request

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
                request = urllib.request.Request(action.url, data=body, method="POST",
                                                 headers={"Content-Type": "application/json"})
                urllib.request.urlopen(request, timeout=NOTIFY_TIMEOUT).close()
            elif action.type == "notify_command":
                subprocess.run(list(action.argv), input=body, timeout=NOTIFY_TIMEOUT, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except Exception as exc:
            report(f"rule {finding['rule']}: action {action.type} failed: {exc}")
    return stop
