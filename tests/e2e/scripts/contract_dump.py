"""A SageMaker training script that records what it sees: environment, argv, files, host names.
It hard-codes /opt/ml paths and connects to algo-1 by name, as real scripts do."""

import json
import os
import socket
import sys

import helper  # a sibling module in the source dir

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
local_rank = int(os.environ["LOCAL_RANK"])
host = socket.gethostname()
for i in range(50):
    print(f"line {i} of rank {rank}", flush=True)
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
print(f"loss={1.0 / (rank + 1):.4f}")
print(f"allreduce={value.item()}")

if local_rank == 0:
    channels = {}
    for name in json.loads(os.environ["SM_CHANNELS"]):
        root = os.environ[f"SM_CHANNEL_{name.upper()}"]
        channels[name] = sorted(
            os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files
        )
    record = {
        "host": host,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("SM_", "TRAINING_JOB_NAME", "MASTER_", "CUDA_"))},
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "helper": helper.NAME,
        "algo_1": socket.gethostbyname("algo-1"),
        "world": world,
        "allreduce": value.item(),
        "channels": channels,
        "config": {
            name: json.load(open(f"/opt/ml/input/config/{name}.json"))
            for name in ("hyperparameters", "resourceconfig", "inputdataconfig")
        },
        "code": sorted(os.listdir("/opt/ml/code")),
    }
    with open(f"/opt/ml/model/{host}.json", "w") as f:
        json.dump(record, f)
    with open(f"/opt/ml/output/data/{host}.txt", "w") as f:
        f.write(host)
dist.destroy_process_group()
