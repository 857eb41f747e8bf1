"""What an instance sees of the machine (tests/e2e/test_isolation.py): run by torchrun, one process per
instance, it tries each thing and writes what happened to /opt/ml/model/<host>.json.

    --hidden PATHS        JSON list of paths of this machine the instance must not see
    --channel-source DIR  the local directory the train channel was downloaded from"""

import argparse
import errno
import json
import os
import socket


def write_error(path: str, mode: str = "w") -> str | None:
    """The errno name of writing `path`, None when it could be written."""
    try:
        with open(path, mode) as f:
            f.write("probe")
    except OSError as exc:
        return errno.errorcode[exc.errno]
    if mode == "w":
        os.remove(path)
    return None


def main() -> None:
    # Before this process writes anything (torchrun's own log directory is in /tmp already).
    at_start = {d: sorted(os.listdir(d)) for d in ("/tmp", "/dev/shm")}
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=json.loads, required=True)
    parser.add_argument("--channel-source", required=True)
    args = parser.parse_args()
    host = os.environ["SM_CURRENT_HOST"]

    import torch
    import torch.distributed as dist

    import shipyard.parallel

    record = {
        "hostname": socket.gethostname(),
        "at_start": at_start,
        "system_writes": {p: write_error(p) for p in ("/usr/local/shipyard-probe", "/etc/shipyard-probe",
                                                      "/shipyard-probe")},
        "visible": {p: os.path.exists(p) for p in args.hidden},
        "channel": open("/opt/ml/input/data/train/x.txt").read(),
        "channel_source_write": write_error(os.path.join(args.channel_source, "x.txt"), "a"),
        "python": {"torch": torch.__version__, "shipyard.parallel": os.path.dirname(shipyard.parallel.__file__)},
        "home_write": write_error(os.path.join(os.path.expanduser("~"), "shipyard-probe")),
    }
    dist.init_process_group("gloo")
    for directory in ("/tmp", "/dev/shm"):
        with open(os.path.join(directory, "shipyard-same-name"), "w") as f:
            f.write(host)
    dist.barrier()  # every instance has written its own before any reads back
    record["private"] = {d: open(os.path.join(d, "shipyard-same-name")).read() for d in ("/tmp", "/dev/shm")}
    dist.destroy_process_group()
    with open(f"/opt/ml/model/{host}.json", "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main()
