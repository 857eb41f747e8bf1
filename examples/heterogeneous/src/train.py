"""A training job whose batches need heavy preprocessing, run two ways (examples/heterogeneous/run.py):

    heterogeneous  SageMaker's pattern (its tf.data service example, here with plain sockets): a `data`
                   instance group prepares the batches and serves them over the network; the `train` group
                   runs torch DDP on them, so the trainers never prepare data themselves.
    homogeneous    one group of trainers, each preparing its own batches before every step.

Every host runs this same script and branches on its group (SM_CURRENT_INSTANCE_GROUP), as on SageMaker.

    data   one server per data host; each trainer rank connects to one (rank % data hosts), says its rank,
           and gets --batches batches: features made from a seeded random draw by --work rounds of a
           nonlinear transform (the preprocessing), and a label from a fixed rule. The server prepares
           ahead of the trainer as far as the socket's buffers let it.
    train  torchrun on the distribution's group: DDP over gloo; rank 0 saves the model to SM_MODEL_DIR.
           --step-ms stands in for an accelerator's step (the trainer waits that long per step, its CPU
           idle, as a GPU step leaves it): on a machine without GPUs there is nothing else to keep busy.

Every host prints one `HETERO {...}` line with what it saw of the contract and what it did."""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, default=0, help="the data servers' port (a heterogeneous job)")
parser.add_argument("--batches", type=int, default=20)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--features", type=int, default=32)
parser.add_argument("--work", type=int, default=1, help="rounds of the preprocessing transform per batch")
parser.add_argument("--step-ms", type=float, default=0.0, help="an accelerator's step time, stood in for")
parser.add_argument("--consumers", type=int, default=2, help="trainer ranks in all (each is served once)")
args, _ = parser.parse_known_args()

GROUP = os.environ["SM_CURRENT_INSTANCE_GROUP"]
GROUPS = json.loads(os.environ["SM_INSTANCE_GROUPS_DICT"])
HOST = os.environ["SM_CURRENT_HOST"]
with open(os.path.join(os.environ.get("SM_INPUT_CONFIG_DIR", "/opt/ml/input/config"), "resourceconfig.json")) as f:
    RESOURCES = json.load(f)
REPORT = {
    "host": HOST, "group": GROUP, "is_hetero": os.environ["SM_IS_HETERO"],
    "group_hosts": json.loads(os.environ["SM_CURRENT_INSTANCE_GROUP_HOSTS"]),
    "instance_type": os.environ["SM_CURRENT_INSTANCE_TYPE"],
    "groups": json.loads(os.environ["SM_INSTANCE_GROUPS"]),
    "distribution_groups": json.loads(os.environ["SM_DISTRIBUTION_INSTANCE_GROUPS"]),
    "channels": sorted(json.loads(os.environ["SM_CHANNELS"])),
    "resourceconfig": {k: RESOURCES[k] for k in ("current_group_name", "current_instance_type", "instance_groups")},
    "torchrun": "TORCHELASTIC_RUN_ID" in os.environ,
}


def receive(connection: socket.socket, size: int) -> bytearray:
    """Exactly `size` bytes (one recv may return fewer, whatever its flags)."""
    data, got = bytearray(size), 0
    view = memoryview(data)
    while got < size:
        n = connection.recv_into(view[got:])
        if not n:
            raise EOFError(f"the connection ended after {got} of {size} bytes")
        got += n
    return data


def batch(rank: int, index: int):
    """Batch `index` for trainer `rank`, preprocessed: --work rounds of the transform."""
    import numpy as np

    rng = np.random.default_rng(1000 * rank + index)
    x = rng.standard_normal((args.batch_size, args.features)).astype(np.float32)
    mix = np.random.default_rng(7).standard_normal((args.features, args.features)).astype(np.float32)
    mix /= np.sqrt(args.features)
    for _ in range(args.work):
        x = np.tanh(x @ mix + 0.1)
    y = (x.sum(axis=1, keepdims=True) > 0).astype(np.float32)
    return np.concatenate([x, y], axis=1)


def serve() -> None:
    data_hosts = sorted(GROUPS["data"]["hosts"])
    mine = [r for r in range(args.consumers) if r % len(data_hosts) == data_hosts.index(HOST)]
    served = {}
    server = socket.create_server((HOST, args.port))   # this host's own address, from /etc/hosts

    def one(connection: socket.socket) -> None:
        with connection:
            rank = struct.unpack("!i", receive(connection, 4))[0]
            for index in range(args.batches):
                payload = batch(rank, index).tobytes()
                connection.sendall(struct.pack("!q", len(payload)) + payload)
            served[rank] = args.batches

    threads = []
    while len(threads) < len(mine):
        connection, _ = server.accept()
        threads.append(threading.Thread(target=one, args=(connection,)))
        threads[-1].start()
    for thread in threads:
        thread.join()
    server.close()
    print("HETERO " + json.dumps({**REPORT, "served": served}), flush=True)


def from_data_group(rank: int):
    """The batches a data host serves this rank, as they arrive."""
    import numpy as np

    data_hosts = sorted(GROUPS["data"]["hosts"])
    address = (data_hosts[rank % len(data_hosts)], args.port)
    deadline = time.monotonic() + 60
    while True:   # the data host's server may not be listening yet
        try:
            stream = socket.create_connection(address, timeout=60)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    with stream:
        stream.sendall(struct.pack("!i", rank))
        for _ in range(args.batches):
            size = struct.unpack("!q", receive(stream, 8))[0]
            yield np.frombuffer(receive(stream, size), dtype=np.float32).reshape(args.batch_size, args.features + 1)


def prepared_here(rank: int):
    for index in range(args.batches):
        yield batch(rank, index)


def train() -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(args.features, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    batches = from_data_group(rank) if "data" in GROUPS else prepared_here(rank)
    losses, waited, began = [], 0.0, time.perf_counter()
    while True:
        asked = time.perf_counter()
        block = next(batches, None)
        waited += time.perf_counter() - asked   # receiving, or preparing it here
        if block is None:
            break
        block = torch.from_numpy(block.copy())
        x, y = block[:, :-1], block[:, -1:]
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)
        loss.backward()
        optimizer.step()
        time.sleep(args.step_ms / 1000)
        losses.append(loss.item())
    loop = time.perf_counter() - began
    total = torch.tensor([float(len(losses))])
    dist.all_reduce(total)
    if rank == 0:
        torch.save(model.module.state_dict(), os.path.join(os.environ["SM_MODEL_DIR"], "model.pt"))
    print("HETERO " + json.dumps({**REPORT, "rank": rank, "world": world, "received": len(losses),
                                  "all_received": int(total.item()), "first_loss": losses[0],
                                  "last_loss": losses[-1], "waited_s": waited, "loop_s": loop}), flush=True)
    dist.destroy_process_group()


if GROUP == "data":
    serve()
else:
    train()
