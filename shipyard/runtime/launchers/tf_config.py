"""`TF_CONFIG` as the TensorFlow training toolkit builds it (spec 2.9 `_build_tf_config_for_ps`, 2.10
`_build_tf_config_for_mwms`): the same roles, order, task types and indices, and `environment: cloud`.

One deliberate difference, the ports. The toolkit gives every host the same fixed ports (2222 for
master and workers, 2223 for parameter servers, 8890 for MWMS workers). Here instances share this
machine's network namespace and TensorFlow's gRPC server binds the wildcard address, so a port is
taken for every instance and every job at once. Each job therefore derives its ports from its own
free `master_port`, one per task: host i of n (its place in the cluster list) gets

    master/worker (PS) and worker (MWMS):  master_port + i
    parameter server:                      master_port + n + i

so a job reserves port_span(n) ports from its master_port (runtime/ports.py).
"""

from __future__ import annotations

from collections.abc import Callable

Address = Callable[[str], str]  # host name -> what other instances reach it by (LaunchContext.address)


def port_span(host_count: int) -> int:
    """How many ports from the base a job of host_count instances may use: a worker and a ps per host."""
    return 2 * host_count


def worker_port(base: int, hosts: list[str], host: str) -> int:
    return base + hosts.index(host)


def ps_port(base: int, hosts: list[str], host: str) -> int:
    return base + len(hosts) + hosts.index(host)


def _endpoints(hosts: list[str], address: Address, port: Callable[[str], int]) -> list[str]:
    return [f"{address(host)}:{port(host)}" for host in hosts]


def parameter_server(hosts: list[str], current_host: str, address: Address, base_port: int,
                     ps_task: bool = False) -> dict:
    """The first host is the `master` (the TF1 role the toolkit uses, not `chief`), the others are
    `worker`s, and every host runs a `ps`. With ps_task, the task is this host's parameter server."""
    masters, workers = hosts[:1], hosts[1:]
    cluster = {"master": _endpoints(masters, address, lambda h: worker_port(base_port, hosts, h))}
    if len(hosts) > 1:
        cluster["ps"] = _endpoints(hosts, address, lambda h: ps_port(base_port, hosts, h))
    if workers:
        cluster["worker"] = _endpoints(workers, address, lambda h: worker_port(base_port, hosts, h))
    if ps_task:
        task = {"index": hosts.index(current_host), "type": "ps"}
    elif current_host == masters[0]:
        task = {"index": 0, "type": "master"}
    else:
        task = {"index": workers.index(current_host), "type": "worker"}
    return {"cluster": cluster, "environment": "cloud", "task": task}


def multi_worker_mirrored(hosts: list[str], current_host: str, address: Address, base_port: int) -> dict:
    """Every host is a `worker`, in cluster order; the first is the chief by TensorFlow's rule."""
    workers = _endpoints(hosts, address, lambda h: worker_port(base_port, hosts, h))
    return {"cluster": {"worker": workers}, "environment": "cloud",
            "task": {"index": hosts.index(current_host), "type": "worker"}}
