"""Issue 16's pollution test: with --mode pollute, leave everything a job can leave behind in its
instance; with --mode inspect, report what of it a job on the same warm pool finds (JSON in
/opt/ml/model/<host>.json). Runs under torchrun, so the rank is a process torchrun started."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

PRELOADED = "torch" in sys.modules       # before any import of the script's: the zygote's
MODULES_AT_START = set(sys.modules)

import argparse  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=["pollute", "inspect"], required=True)
args, _ = parser.parse_known_args()
host = json.loads(os.environ["SM_TRAINING_ENV"])["current_host"]
cache = os.environ["SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY"]
LITTER = ["/tmp/litter", "/var/tmp/litter", "/dev/shm/litter", os.path.expanduser("~/litter"),
          "/opt/ml/code/litter", "/opt/ml/model/litter"]

if args.mode == "pollute":
    for path in LITTER:
        with open(path, "w") as f:
            f.write("from the job before")
    with open(os.path.join(cache, f"{host}.txt"), "w") as f:
        f.write("kept on purpose")
    os.environ["POLLUTED"] = "1"
    sys.modules["pollutant"] = type(sys)("pollutant")
    sys.path.insert(0, "/polluted/path")
    signal.signal(signal.SIGUSR1, lambda *_: None)
    threading.Thread(target=time.sleep, args=(300,), daemon=True).start()
    subprocess.Popen(["sleep", "313"], start_new_session=True)            # outlives the script
    if os.fork() == 0:                                                     # a daemon, double-forked
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "314"])
        os._exit(0)
    leaked = open("/opt/ml/input/config/hyperparameters.json")  # noqa: SIM115 never closed
    os.chdir("/tmp")
    print("polluted", flush=True)
else:
    processes = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                processes[pid] = f.read().replace(b"\0", b" ").decode().strip()
        except OSError:
            pass
    record = {
        "preloaded": PRELOADED,
        "modules": sorted(m for m in MODULES_AT_START if m == "pollutant" or "warm_probe" in m),
        # the storage client the warm process preloads for its agents, not for the job
        "storage_client": sorted({m.partition(".")[0] for m in MODULES_AT_START} & {"s3fs", "aiobotocore", "aiohttp"}),
        "mp_main_is_main": sys.modules.get("__mp_main__") in (None, sys.modules["__main__"]),
        "litter": {path: os.path.exists(path) for path in LITTER},
        "cache": sorted(os.listdir(cache)),
        "polluted_env": os.environ.get("POLLUTED"),
        "polluted_path": "/polluted/path" in sys.path,
        "sleepers": [c for c in processes.values() if c.startswith("sleep 31")],
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
        # What descriptors past stdin/out/err lead to: this listing's own, or a heartbeat file being written
        # at that moment; never a socket, a pipe or a file of the job before.
        "fd_targets": [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                       if int(fd) > 2 and os.path.exists(f"/proc/self/fd/{fd}")],
        "threads": sorted(t.name for t in threading.enumerate()),
        "sigusr1_default": signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL,
        "cwd": os.getcwd(),
        "argv": sys.argv,
        "forked": "shipyard.runtime.warm" in processes[str(os.getpid())],
        "hyperparameters": json.load(open("/opt/ml/input/config/hyperparameters.json")),
        "capabilities": [line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff")][0],
    }
    with open(f"/opt/ml/model/{host}.json", "w") as f:
        json.dump(record, f)
