"""What this machine has, and how N instances of one type are carved out of it.

`plan_instances` is pure (a machine description in, per-instance shares out) so placement can be tested and
shown in a dry run without a GPU; `detect()` is the only part that looks at the real machine."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard import settings
from shipyard.errors import CapacityError, ValidationError

if TYPE_CHECKING:  # the catalog loads pydantic; a controller waiting in the queue reads side_by_side only
    from shipyard.spec.catalog import InstanceType

# MemTotal is a few percent below the nominal RAM (the kernel keeps some), and so is a real ml.* instance's;
# without slack a 16 GiB machine could not run one 16 GiB instance.
MEMORY_SLACK = 1.05
NVIDIA_SMI_TIMEOUT_S = 10

# How many instances a machine runs side by side, whatever their type says (sized types are also held
# to their vCPUs and memory below): an instance is at least an agent and a training process, and past
# a few per core, or half a GiB each, they only slow each other down (1000 on 2 cores: load 64).
INSTANCES_PER_VCPU = 4
GIB_PER_INSTANCE = 0.5

@dataclass(frozen=True)
class MachineResources:
    vcpus: int
    memory_gib: float
    gpus: tuple[str, ...]  # device ids as CUDA_VISIBLE_DEVICES takes them


@dataclass(frozen=True)
class InstanceResources:
    vcpus: int
    memory_gib: float | None  # None: no limit of its own, shares the machine's
    gpus: tuple[str, ...]  # becomes this instance's CUDA_VISIBLE_DEVICES


def _memory_gib() -> float:
    total = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    if total is None:
        import psutil  # only off Linux

        total = psutil.virtual_memory().total
    try:  # a container's memory limit (cgroup v2) is what we really have
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return total / 2**30


def _vcpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # honours taskset / cpusets, unlike cpu_count
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _gpus() -> tuple[str, ...]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()  # a driver that does not answer is a machine without usable GPUs
    found = tuple(line.strip() for line in out.splitlines() if line.strip())
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not found:
        return found
    # The user already restricted this process's GPUs; split only those.
    return tuple(dev.strip() for dev in visible.split(",") if dev.strip() and not dev.strip().startswith("-"))


def detect() -> MachineResources:
    return MachineResources(vcpus=_vcpus(), memory_gib=_memory_gib(), gpus=_gpus())



def side_by_side(machine: MachineResources) -> int:
    """The most instances `machine` runs at once: SHIPYARD_LOCAL_MAX_INSTANCES, else from its CPUs and
    memory (at least 2, so a distributed job always fits)."""
    return settings.local_max_instances() or max(
        2, min(INSTANCES_PER_VCPU * machine.vcpus, int(machine.memory_gib / GIB_PER_INSTANCE)))

def plan_instances(
    groups: Sequence[tuple[InstanceType, int]], machine: MachineResources, oversubscribe: bool = False
) -> list[InstanceResources]:
    """Per-instance CPU, memory and GPU shares for `count` instances of each (instance_type, count) group on
    `machine`, in order (a heterogeneous job's groups, or one group).

    Sized types must fit side by side; `oversubscribe` lets CPU and memory be shared beyond that, never
    GPUs, which are always handed out disjointly, across groups too."""
    for _, count in groups:
        if count < 1:
            raise ValidationError("instance_count", count, "must be at least 1")
    label = " + ".join(f"{count} x {it.name}" for it, count in groups)
    total, have_gpus = sum(count for _, count in groups), len(machine.gpus)
    limit = side_by_side(machine)
    if total > limit:
        raise CapacityError(
            f"{label}: this machine runs at most {limit} instances side by side ({machine.vcpus} vCPUs, "
            f"{machine.memory_gib:.1f} GiB: {INSTANCES_PER_VCPU} per vCPU, {GIB_PER_INSTANCE:g} GiB each); "
            "use fewer instances, the ray backend, or raise SHIPYARD_LOCAL_MAX_INSTANCES"
        )

    # GPUs per instance of each group: a type that takes "all GPUs" shares what the sized ones leave.
    sized = sum(count * it.gpus for it, count in groups if it.gpus is not None)
    whole = [(it, count) for it, count in groups if it.gpus is None]
    left = have_gpus - sized
    per_gpu = {it.name: it.gpus for it, _ in groups if it.gpus is not None}
    if sized > have_gpus:
        raise CapacityError(
            f"{label} needs {sized} GPUs and this machine has {have_gpus} "
            "(GPUs cannot be oversubscribed); use fewer instances or a smaller type"
        )
    if whole:
        wanting = sum(count for _, count in whole)
        names = " + ".join(f"{count} x {it.name}" for it, count in whole)
        if have_gpus == 0:
            raise CapacityError(f"{names}: {whole[0][0].name} needs GPUs and this machine has none; use 'local'")
        if wanting > left:
            raise CapacityError(
                f"{label}: every {whole[0][0].name} instance needs a GPU and this machine has {left}"
                f"{' left for them' if sized else ''}; use at most {left} instances (GPUs cannot be oversubscribed)"
            )
        for it, _ in whole:
            per_gpu[it.name] = left // wanting

    short = []
    vcpus_needed = sum(count * it.vcpus for it, count in groups if it.vcpus is not None)
    memory_needed = sum(count * it.memory_gib for it, count in groups if it.memory_gib is not None)
    if vcpus_needed > machine.vcpus:
        short.append(f"{vcpus_needed} vCPUs (this machine has {machine.vcpus})")
    if memory_needed > machine.memory_gib * MEMORY_SLACK:
        short.append(f"{memory_needed:g} GiB memory (this machine has {machine.memory_gib:.1f})")
    if short and not oversubscribe:
        raise CapacityError(
            f"{label} needs {' and '.join(short)}; use fewer or smaller instances, or let instances "
            "share CPUs and memory with oversubscribe=True (--oversubscribe)"
        )

    planned, next_gpu = [], 0
    for it, count in groups:
        # An instance cannot use more than the machine has, whatever its type says (SM_NUM_CPUS reports this).
        vcpus = machine.vcpus if it.vcpus is None else min(it.vcpus, machine.vcpus)
        memory = None if it.memory_gib is None else min(it.memory_gib, machine.memory_gib)
        for _ in range(count):
            gpus = machine.gpus[next_gpu:next_gpu + per_gpu[it.name]]
            next_gpu += per_gpu[it.name]
            planned.append(InstanceResources(vcpus=vcpus, memory_gib=memory, gpus=gpus))
    return planned
