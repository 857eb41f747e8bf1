"""Where a job's instances go on a Ray cluster: the one place instance types become Ray resources, and
what a job waiting for capacity is told.

Every instance is one placement-group bundle, and its actor takes the whole bundle:

    CPU                 the type's vcpus; 1 for the local types, which have no size of their own
                        (their instances share the node, and SM_NUM_CPUS reports the node's CPUs)
    GPU                 the type's gpus; 1 for local_gpu ("all of this machine's GPUs" means nothing
                        on a cluster); none when the type has none
    instance_type:NAME  1, for every catalog type but the local ones: a node offers the types it is,
                        e.g. `ray start --resources='{"instance_type:ml.g5.xlarge": 1}'`

Memory is not requested: Ray's `memory` resource is what a node has left after its object store, so
a 16 GiB type could never fit a 16 GiB machine; the type label already says what the node is.

The bundles are placed STRICT_SPREAD (one instance per node, as on SageMaker); SHIPYARD_RAY_PACK=1
places them PACK instead, so instances may share a node when the cluster has fewer nodes."""

from __future__ import annotations

from shipyard.spec.catalog import InstanceType

LOCAL_TYPES = frozenset({"local", "local_gpu"})
LABEL_PREFIX = "instance_type:"
SPREAD, PACK = "STRICT_SPREAD", "PACK"


def bundle(instance_type: InstanceType) -> dict[str, float]:
    """The Ray resources one instance of this type takes."""
    resources = {"CPU": float(instance_type.vcpus or 1)}
    gpus = 1 if instance_type.gpus is None else instance_type.gpus
    if gpus:
        resources["GPU"] = float(gpus)
    if instance_type.name not in LOCAL_TYPES:
        resources[LABEL_PREFIX + instance_type.name] = 1.0
    return resources


def strategy(pack: bool) -> str:
    return PACK if pack else SPREAD


def _fits(need: dict[str, float], have: dict[str, float]) -> bool:
    return all(have.get(key, 0.0) >= amount for key, amount in need.items())


def _show(resources: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(resources.items())) + "}"


def waiting_message(bundles: list[dict[str, float]], placement: str, nodes: list[dict]) -> str:
    """Why a placement group is not placed yet, and what would place it. `nodes` is `ray.nodes()`."""
    alive = [n for n in nodes if n.get("Alive")]
    kinds: list[dict[str, float]] = []   # a heterogeneous job's groups each have their own bundle
    for need in bundles:
        if need not in kinds:
            kinds.append(need)
    able = sum(any(_fits(need, n.get("Resources", {})) for need in kinds) for n in alive)
    what = " + ".join(f"{bundles.count(need)} instance(s) of {_show(need)}" for need in kinds)
    if placement == SPREAD:
        what += ", each on its own node"
    missing = [k for need in kinds for k in need
               if k.startswith(LABEL_PREFIX) and not any(k in n.get("Resources", {}) for n in alive)]
    if missing:
        label = missing[0]
        return (f"waiting for capacity: {what}; no node offers {label}: start nodes with "
                f"`ray start --resources='{{\"{label}\": 1}}'`")
    if placement == SPREAD and able < len(bundles):
        return (f"waiting for capacity: {what}; {able} of the cluster's {len(alive)} alive node(s) can hold one: "
                "add nodes, or set SHIPYARD_RAY_PACK=1 to let instances share a node")
    if placement == PACK and able == 0:
        return f"waiting for capacity: {what}; none of the cluster's {len(alive)} alive node(s) is big enough: add one"
    return f"waiting for capacity: {what}; the nodes that can hold them are busy with other work"
