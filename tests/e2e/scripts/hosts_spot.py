"""A spot job's script, one process per host: steps of 0.1 s, a checkpoint every 5 and at the
interruption notice. Every run (the first, and a survivor's or a replacement's after a lost host is
replaced) writes what algo-* resolve to on its host and which network namespace it is in to
/opt/ml/model/<host>.json: a survivor's file is its last run's, after it rejoined."""

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


signal.signal(signal.SIGTERM, on_notice)
record()
while step < int(sys.argv[sys.argv.index("--steps") + 1]):
    step += 1
    print(f"step={step}", flush=True)
    time.sleep(0.1)
    if step % 5 == 0:
        save()
record()
