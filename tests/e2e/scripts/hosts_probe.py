"""A SageMaker training script (torch_distributed, gloo on CPU) that records what its host sees of the
network: the contract's interface and hosts, the rendezvous variables, what algo-* resolve to, the
interfaces and addresses the host has, its network namespace; and sums the ranks with all_reduce.
Each host's record goes to /opt/ml/model/<host>.json and to the log (a line starting `HOSTS `)."""

import json
import os
import socket

import psutil
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)

if int(os.environ["LOCAL_RANK"]) == 0:
    hosts = json.loads(os.environ["SM_HOSTS"])
    resolved = {}
    for name in hosts:
        try:
            resolved[name] = socket.gethostbyname(name)
        except OSError as error:
            resolved[name] = f"unresolved: {error}"
    channel = os.environ["SM_CHANNEL_TRAIN"]
    record = {
        "host": socket.gethostname(),
        "rank": rank,
        "world": world,
        "allreduce": value.item(),
        "env": {k: os.environ.get(k) for k in (
            "SM_NETWORK_INTERFACE_NAME", "SM_CURRENT_HOST", "SM_HOSTS", "MASTER_ADDR", "MASTER_PORT",
            "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")},
        "resourceconfig": json.load(open("/opt/ml/input/config/resourceconfig.json")),
        "resolved": resolved,
        "interfaces": {name: sorted(a.address for a in addrs if a.family == socket.AF_INET)
                       for name, addrs in psutil.net_if_addrs().items()},
        "netns": os.readlink("/proc/self/ns/net"),
        "train": sorted(open(os.path.join(channel, f)).read() for f in os.listdir(channel)),
    }
    print("HOSTS " + json.dumps(record), flush=True)
    with open(f"/opt/ml/model/{os.environ['SM_CURRENT_HOST']}.json", "w") as f:
        json.dump(record, f)
dist.destroy_process_group()
