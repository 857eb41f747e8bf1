"""A spot job's script, one process per host: steps of 0.1 s, a checkpoint every 5 and at the
interruption notice. Every run (the first, and a survivor's or a replacement's after a lost host is
replaced) writes what algo-* resolve to on its host and which network namespace it is in to
/opt/ml/model/<host>.json: a survivor's file is its last run's, after it rejoined. With `--hold N`, the
first run (from step 0) stops at step N and waits to be interrupted, so a test's fault always lands
mid-job however slow the machine, and the run after it has only the steps past N left to train."""

import json
import os
import signal
import socket
import sys
import time

host = os.environ["SM_CURRENT_HOST"]
hosts = json.loads(os.environ["SM_HOSTS"])
ckpt = f"/opt/ml/checkpoints/state-{host}.json"
step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
print(f"run from step {step}", flush=True)


def save():
    with open(ckpt + ".tmp", "w") as f:
        json.dump({"step": step}, f)
    os.replace(ckpt + ".tmp", ckpt)


def record():
    seen = {}
    for name in hosts:
        try:
            seen[name] = socket.gethostbyname(name)
        except OSError as error:
            seen[name] = f"unresolved: {error}"
    with open(f"/opt/ml/model/{host}.json", "w") as f:
        json.dump({"resolved": seen, "netns": os.readlink("/proc/self/ns/net"), "from_step": step}, f)


def on_notice(*_):
    save()
    print(f"notice at step {step}", flush=True)
    sys.exit(0)


def argument(name: str, default: int) -> int:
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


signal.signal(signal.SIGTERM, on_notice)
steps = argument("--steps", 0)
hold = argument("--hold", steps) if step == 0 else steps
record()
while step < steps:
    if step == hold:
        save()
        time.sleep(3600)   # until the interruption
    step += 1
    print(f"step={step}", flush=True)
    time.sleep(0.1)
    if step % 5 == 0:
        save()
record()
