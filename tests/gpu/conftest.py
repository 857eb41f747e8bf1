"""The tests that need an NVIDIA GPU (`make gpu-check`). A GPU is usable when nvidia-smi lists one (the
GPUs local_gpu instances are carved from, shipyard/backends/resources.py) and this torch is a CUDA build
that sees it; without both, every test here skips saying which is missing. `@pytest.mark.gpu(count=2)`
asks for more than one GPU.

Deciding costs nothing where there is no driver: torch is imported only once nvidia-smi lists a GPU
(before that, its package metadata says whether it is a CPU-only build)."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import shutil
import subprocess

import pytest

NVIDIA_SMI_TIMEOUT_S = 10


@functools.cache
def machine_gpus() -> tuple[str, ...]:
    """The GPU ids local_gpu splits between instances (nvidia-smi's indices, within CUDA_VISIBLE_DEVICES)."""
    from shipyard.backends.resources import detect

    return detect().gpus


def _driver_problem() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi is not installed (no NVIDIA driver)"
    if not machine_gpus():
        return "nvidia-smi lists no GPU (or does not answer)"
    return None


def _torch_problem(import_torch: bool) -> str | None:
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "torch is not installed"
    if "+cpu" in version:
        return f"torch {version} is a CPU-only build"
    if not import_torch:
        return None
    import torch

    if torch.version.cuda is None:
        return f"torch {version} is not a CUDA build"
    if not torch.cuda.is_available():
        return f"torch {version} (CUDA {torch.version.cuda}) sees no GPU: torch.cuda.is_available() is False"
    return None


@functools.cache
def gpu_problem() -> str | None:
    """None when the GPU tests can run, else what is missing (the driver's side, torch's, or both)."""
    driver = _driver_problem()
    problems = [p for p in (driver, _torch_problem(import_torch=driver is None)) if p]
    return "; ".join(problems) or None


def pytest_runtest_setup(item):
    marker = item.get_closest_marker("gpu")
    if marker is None:
        return
    if problem := gpu_problem():
        pytest.skip(f"no usable GPU: {problem}")
    count, have = marker.kwargs.get("count", 1), len(machine_gpus())
    if have < count:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        pytest.skip(f"needs {count} GPUs, this machine has {have}"
                    + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""))


@pytest.fixture
def gpus() -> tuple[str, ...]:
    return machine_gpus()


@pytest.fixture
def gpu_uuids() -> dict[str, str]:
    """nvidia-smi index -> the GPU's UUID without its "GPU-" prefix, lower case (as torch prints it)."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"], capture_output=True,
                         text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=True).stdout
    rows = (line.split(",") for line in out.splitlines() if line.strip())
    return {index.strip(): uuid.strip().lower().removeprefix("gpu-") for index, uuid in rows}
