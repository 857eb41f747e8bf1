"""SMDDP served by shipyard: the `smddp` backend of torch.distributed (gloo here), the API before 1.4
over it, and what is refused. The 2-instance job is tests/e2e/test_smddp_smp_v2.py."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from shipyard.errors import ValidationError
from shipyard.parallel import smddp
from shipyard.runtime import served_libraries

sys.path.insert(0, str(Path(__file__).parents[1] / "parallel"))
from ranks import run_ranks  # noqa: E402

INJECT = Path(served_libraries.__file__).parent / "inject"


@pytest.fixture(autouse=True)
def _served():
    served_libraries.install()
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_importing_torch_smddp_registers_a_backend_served_by_gloo():
    importlib.import_module("smdistributed.dataparallel.torch.torch_smddp")
    smddp.register()  # idempotent
    assert dist.Backend.backend_list.count("smddp") == 1
    dist.init_process_group(backend="smddp", store=dist.HashStore(), rank=0, world_size=1)
    assert dist.get_backend() == "smddp" and smddp.serving() == "gloo"
    assert isinstance(dist.group.WORLD._get_backend(torch.device("cpu")), dist.ProcessGroupGloo)
    total = torch.tensor([2.0])
    dist.all_reduce(total)
    assert total.item() == 2.0


def test_an_smddp_group_on_cpu_is_ended_at_exit_as_a_gloo_one():
    """The exit guard (runtime/process_group_exit.py) destroys it before the interpreter's teardown, which
    could abort the process after training; it used to pass over any group not named 'gloo'."""
    from shipyard.runtime import process_group_exit

    smddp.register()
    dist.init_process_group(backend="smddp", store=dist.HashStore(), rank=0, world_size=1)
    process_group_exit._destroy_gloo_group()
    assert not dist.is_initialized()


def test_legacy_init_outside_a_distributed_job_says_how_to_run_it(monkeypatch):
    sdp = importlib.import_module("smdistributed.dataparallel.torch.distributed")
    monkeypatch.delenv("RANK", raising=False)
    assert not sdp.is_available()
    with pytest.raises(ValidationError, match="init_process_group.*distribution=.*smdistributed"):
        sdp.init_process_group()
    with pytest.raises(ValidationError, match="init_process_group.backend='nccl'"):
        sdp.init_process_group(backend="nccl")


def test_smddp_for_tensorflow_is_refused_naming_the_replacement():
    with pytest.raises(ImportError, match="discontinued.*multi_worker_mirrored_strategy"):
        importlib.import_module("smdistributed.dataparallel.tensorflow")


LEGACY = """
import torch
import smdistributed.dataparallel.torch.distributed as dist
from smdistributed.dataparallel.torch.parallel.distributed import DistributedDataParallel as DDP
import torch.distributed

dist.init_process_group()
mean = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(mean, op=dist.ReduceOp.AVERAGE)
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))
model(torch.full((2, 4), float(dist.get_rank()))).sum().backward()
print(f"rank={dist.get_rank()} world={dist.get_world_size()} local={dist.get_local_rank()} "
      f"backend={torch.distributed.get_backend()} mean={mean.item()} grad={model.module.weight.grad.sum().item()}")
"""


@pytest.mark.slow
def test_legacy_api_creates_the_smddp_group_and_averages_gradients(tmp_path):
    # as a job's ranks: the sitecustomize ends them without gloo's teardown aborting one (1 run in 4 did)
    outputs = run_ranks(2, ["-c", LEGACY], tmp_path, extra_env={"PYTHONPATH": str(INJECT),
                                                                 "SHIPYARD_INSTANCE_DIR": str(tmp_path)})
    for rank, output in enumerate(outputs):
        # rank 0's inputs are 0s, rank 1's 1s: the averaged gradient of sum(x . w) is (0 + 2*4) / 2
        assert f"rank={rank} world=2 local={rank} backend=smddp mean=1.5 grad=4.0" in output, output
