"""Reports what each channel looks like from inside an instance, as /opt/ml/model/<host>.json: for File and
FastFile channels every file with its size and the sha256 of its first `read_bytes` bytes, the mount
(type, read-only) and what a write gets; for Pipe channels each epoch's bytes (sha256, length) for
`pipe_epochs` epochs, whose bytes it also keeps as /opt/ml/model/<host>/<channel>_<epoch>. Prints
`probe: started` before it reads anything."""

import argparse
import hashlib
import json
import os
import socket
import time

print("probe: started", flush=True)
parser = argparse.ArgumentParser()
parser.add_argument("--read_bytes", type=int, default=-1)
parser.add_argument("--pipe_epochs", type=int, default=2)
parser.add_argument("--close_early", type=int, default=0)   # Pipe: close each epoch after this many bytes
parser.add_argument("--hold_seconds", type=float, default=0)   # keep a channel file open this long first
parser.add_argument("--hold_once", type=int, default=0)   # hold only when no checkpoint marks an earlier hold
args = parser.parse_args()

data = "/opt/ml/input/data"
config = json.loads(os.environ["SM_INPUT_DATA_CONFIG"])


def mount_of(path):
    best = None
    with open("/proc/self/mountinfo") as info:
        for line in info:
            fields = line.split()
            point, options = fields[4], fields[5]
            fstype = fields[fields.index("-") + 1]
            if path == point or path.startswith(point.rstrip("/") + "/"):
                if best is None or len(point) > len(best[0]):
                    best = (point, fstype, "ro" in options.split(","))
    return {"point": best[0], "type": best[1], "read_only": best[2]}


def digest(path, limit):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read() if limit < 0 else f.read(limit)).hexdigest()


report = {"host": socket.gethostname(), "config": config, "channels": {}}
pipe_head = b""
if args.hold_seconds:
    first = next(iter(config))
    if config[first]["TrainingInputMode"] == "Pipe":   # part of the first epoch read, the rest waiting
        while not os.path.exists(f"{data}/{first}_0"):
            time.sleep(0.05)
        held = open(f"{data}/{first}_0", "rb")
        pipe_head = held.read(1)
    else:
        folder, _, names = next(os.walk(f"{data}/{first}"))
        held = open(os.path.join(folder, names[0]), "rb")
    marker = "/opt/ml/checkpoints/held"
    if not (args.hold_once and os.path.exists(marker)):
        open(marker, "w").close()
        print(f"probe: holding {held.name}", flush=True)
        time.sleep(args.hold_seconds)
    if not pipe_head:
        held.close()
for name, entry in config.items():
    if entry["TrainingInputMode"] == "Pipe":
        epochs = []
        for epoch in range(args.pipe_epochs):
            path = f"{data}/{name}_{epoch}"
            while not os.path.exists(path):
                time.sleep(0.05)
            if pipe_head and epoch == 0 and name == first:   # the pipe held open at the start
                body = pipe_head + held.read()
                held.close()
            else:
                with open(path, "rb") as fifo:
                    body = fifo.read(args.close_early) if args.close_early else fifo.read()
            epochs.append({"sha256": hashlib.sha256(body).hexdigest(), "length": len(body)})
            os.makedirs(f"/opt/ml/model/{socket.gethostname()}", exist_ok=True)
            with open(f"/opt/ml/model/{socket.gethostname()}/{name}_{epoch}", "wb") as out:
                out.write(body)
        report["channels"][name] = {"epochs": epochs, "listing": sorted(os.listdir(data))}
        continue
    root = f"{data}/{name}"
    files = {}
    for folder, _, names in os.walk(root):
        for file in names:
            path = os.path.join(folder, file)
            files[os.path.relpath(path, root)] = {"size": os.path.getsize(path), "sha256": digest(path, args.read_bytes)}
    try:
        open(f"{root}/written-by-the-script", "wb").close()
        write = "allowed"
    except OSError as exc:
        write = exc.strerror
    report["channels"][name] = {"files": files, "mount": mount_of(os.path.realpath(root)), "write": write}

os.makedirs("/opt/ml/model", exist_ok=True)
with open(f"/opt/ml/model/{report['host']}.json", "w") as out:
    json.dump(report, out)
print("probe: done", flush=True)
