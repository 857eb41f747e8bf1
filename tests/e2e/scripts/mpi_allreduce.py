"""mpi4py across every instance: each rank records what it saw (its host, its /opt/ml, its environment,
its network namespace) and the sum of an allreduce, into the model directory of its own instance."""

import json
import os
import socket

from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.rank + 1, op=MPI.SUM)
names = comm.allgather(socket.gethostname())
with open("/opt/ml/input/config/resourceconfig.json") as f:
    resource_host = json.load(f)["current_host"]
record = {
    "rank": comm.rank, "size": comm.size, "sum": total, "hostname": socket.gethostname(), "all_hostnames": names,
    "sm_current_host": os.environ["SM_CURRENT_HOST"], "resourceconfig_host": resource_host,
    "local_rank": int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]), "cwd": os.getcwd(),
    "sm_hosts": json.loads(os.environ["SM_HOSTS"]), "hp_note": os.environ.get("SM_HP_NOTE"),
    "argv": __import__("sys").argv[1:], "netns": os.readlink("/proc/self/ns/net"),
}
with open(f"/opt/ml/model/rank-{comm.rank}.json", "w") as f:
    json.dump(record, f)
print(f"rank {comm.rank} of {comm.size} on {socket.gethostname()}: sum={total}")
