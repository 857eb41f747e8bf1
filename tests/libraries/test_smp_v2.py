"""SMP v2 (`torch.sagemaker`) served by shipyard.parallel: init() reads the SMP parameters and refuses
those it would not apply, state, transform(), and how FSDP is told to shard. The 2-instance tensor
parallel job is tests/e2e/test_smddp_smp_v2.py."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import ShardingStrategy

from shipyard.errors import ValidationError
from shipyard.parallel import smp_v2
from shipyard.runtime import served_libraries

sys.path.insert(0, str(Path(__file__).parents[1] / "parallel"))
from ranks import run_ranks  # noqa: E402

INJECT = Path(served_libraries.__file__).parent / "inject"


@pytest.fixture
def tsm(monkeypatch):
    """torch.sagemaker as a script imports it, in a world of one, with no SMP parameters."""
    for name in ("SM_HP_MP_PARAMETERS", "SM_FRAMEWORK_PARAMS", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    served_libraries.install()
    yield importlib.import_module("torch.sagemaker")
    smp_v2._job.clear()
    smp_v2._sharding.clear()
    smp_v2.state.__dict__.clear()
    if dist.is_initialized():
        dist.destroy_process_group()


def test_state_and_transform_need_init_first(tsm):
    with pytest.raises(ValidationError, match=r"state.tp_size: call torch.sagemaker.init\(\) first"):
        tsm.state.tp_size
    assert getattr(tsm.state, "tp_rank", None) is None  # also an AttributeError
    with pytest.raises(ValidationError, match="transform: call torch.sagemaker.init"):
        tsm.transform(nn.Linear(2, 2))


def test_init_without_parameters_is_plain_pytorch(tsm):
    tsm.init()
    tsm.init()  # idempotent
    assert tsm.is_initialized()
    s = tsm.state
    assert (s.rank, s.world_size, s.tp_size, s.tp_rank, s.hybrid_shard_degree) == (0, 1, 1, 0, 0)
    assert (s.tp_process_group, s.rep_rank_process_group, s.sm_activation_offloading) == (None, None, False)
    assert (s.expert_parallel_degree, s.cp_size) == (1, 1)
    model = nn.Linear(2, 2)
    assert tsm.transform(model) is model  # nothing to split with tensor_parallel_degree 1


@pytest.mark.parametrize("parameters, message", [
    ({"bf16": True}, "mp_parameters.bf16=True: is not applied by torch.sagemaker"),
    ({"pipeline_parallel_degree": 2}, "mp_parameters.pipeline_parallel_degree=2: is not applied"),
    ({"tensor_parallel_degree": 2}, "mp_parameters.tensor_parallel_degree=2: must divide the world size 1"),
    ({"hybrid_shard_degree": 2}, "mp_parameters.hybrid_shard_degree=2: must divide the data-parallel size 1"),
])
def test_init_refuses_what_it_cannot_honour(tsm, monkeypatch, parameters, message):
    monkeypatch.setenv("SM_HP_MP_PARAMETERS", json.dumps(parameters))
    with pytest.raises(ValidationError, match=message):
        tsm.init()


def test_init_config_is_checked_under_its_own_name(tsm, tmp_path):
    with pytest.raises(ValidationError, match="torch.sagemaker.init.config='random_seed': unknown name"):
        tsm.init({"random_seed": 0})
    with pytest.raises(ValidationError, match="torch.sagemaker.init.config='/nowhere.json': must be a readable"):
        tsm.init("/nowhere.json")
    path = tmp_path / "smp.json"
    path.write_text(json.dumps({"sm_activation_offloading": True, "activation_loading_horizon": 4}))
    tsm.init(str(path))  # a file, as SageMaker HyperPod passes it
    assert (tsm.state.sm_activation_offloading, tsm.state.activation_loading_horizon) == (True, 4)


def test_transform_refuses_what_is_not_served(tsm):
    tsm.init()
    with pytest.raises(ValidationError, match="transform.config=.*not served"):
        tsm.transform(nn.Linear(2, 2), config={"moe": True})
    with pytest.raises(ValidationError, match="transform.cp_comm_type='ring'"):
        tsm.transform(nn.Linear(2, 2), cp_comm_type="ring")
    with pytest.raises(ValidationError, match="meta device; delayed parameter initialization is not served"):
        tsm.transform(nn.Linear(2, 2, device="meta"))


def _sharding(degree: int, ndim: int, size: int, tp: int = 1, configured: int | None = None) -> smp_v2.Sharding:
    mesh = SimpleNamespace(ndim=ndim, size=lambda: size)  # only its shape matters to the rules
    config = smp_v2.ParallelConfig({"hybrid_shard_degree": degree if configured is None else configured})
    return smp_v2.Sharding(mesh, degree, config, tp)


S = ShardingStrategy


@pytest.mark.parametrize("degree, ndim, requested, chosen", [
    (2, 2, None, S.HYBRID_SHARD),                  # SMP: a degree below the data-parallel size is hybrid
    (2, 2, S.FULL_SHARD, S.HYBRID_SHARD),
    (2, 2, S.SHARD_GRAD_OP, S._HYBRID_SHARD_ZERO2),
    (4, 1, None, S.FULL_SHARD),                    # one replica: every data-parallel rank shards
    (4, 1, S.HYBRID_SHARD, S.FULL_SHARD),
    (4, 1, S._HYBRID_SHARD_ZERO2, S.SHARD_GRAD_OP),
    (1, 1, None, S.NO_SHARD),
])
def test_fsdp_strategy_follows_hybrid_shard_degree(degree, ndim, requested, chosen):
    arguments = _sharding(degree, ndim, 4).arguments(requested, use_orig_params=False)
    assert arguments["sharding_strategy"] == chosen


def test_fsdp_arguments_that_contradict_the_parameters_are_refused():
    with pytest.raises(ValidationError, match="sharding_strategy=.*NO_SHARD.*conflicts with mp_parameters.hybrid"):
        _sharding(2, 2, 4).arguments(S.NO_SHARD, use_orig_params=False)
    with pytest.raises(ValidationError, match="hybrid_shard_degree=1 means no sharding"):
        _sharding(1, 1, 2, tp=2).arguments(S.FULL_SHARD, use_orig_params=False)
    with pytest.raises(ValidationError, match="use_orig_params=True: with tensor_parallel_degree=2"):
        _sharding(1, 1, 1, tp=2, configured=0).arguments(None, use_orig_params=True)


HYBRID = """
import torch, torch.distributed as dist, torch.sagemaker as tsm
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
tsm.init()
model = FSDP(tsm.transform(torch.nn.Linear(8, 8)), sharding_strategy=ShardingStrategy.HYBRID_SHARD)
print(f"rank={tsm.state.rank} strategy={model.sharding_strategy.name} "
      f"ranks={dist.get_process_group_ranks(model.process_group)} numel={sum(p.numel() for p in model.parameters())}")
"""


@pytest.mark.slow
def test_fsdp_shards_across_hybrid_shard_degree_ranks(tmp_path):
    """The script asks for HYBRID_SHARD with no process group; with hybrid_shard_degree 2 of 2 ranks
    there is one replica, so FSDP shards the 72 parameters across both."""
    outputs = run_ranks(2, ["-c", HYBRID], tmp_path, extra_env={
        "PYTHONPATH": str(INJECT), "SM_HP_MP_PARAMETERS": json.dumps({"hybrid_shard_degree": 2})})
    for rank, output in enumerate(outputs):
        assert f"rank={rank} strategy=FULL_SHARD ranks=[0, 1] numel=36" in output, output


TENSOR_PARALLEL_FSDP = """
import torch, torch.distributed as dist, torch.sagemaker as tsm
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
tsm.init()
torch.manual_seed(0)
model = FSDP(tsm.transform(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))),
             use_orig_params=True)
model(torch.ones(2, 8)).sum().backward()
print(f"rank={tsm.state.rank} tp={dist.get_process_group_ranks(tsm.state.tp_process_group)} "
      f"fsdp={dist.get_process_group_ranks(model.process_group)} strategy={model.sharding_strategy.name} "
      f"numel={sum(p.numel() for p in model.parameters())}")
"""


@pytest.mark.slow
def test_tensor_parallel_slices_are_sharded_across_the_data_parallel_ranks(tmp_path):
    """4 ranks, tensor_parallel_degree 2: ranks 0,1 and 2,3 split the layers; FSDP shards each slice
    across the ranks holding the same one (0,2 and 1,3): (8*8 + 8) + (8*8 + 8, the bias replicated) = 144 / 2."""
    outputs = run_ranks(4, ["-c", TENSOR_PARALLEL_FSDP], tmp_path, extra_env={
        "PYTHONPATH": str(INJECT), "SM_HP_MP_PARAMETERS": json.dumps({"tensor_parallel_degree": 2})})
    for rank, output in enumerate(outputs):
        tp, fsdp = [rank - rank % 2, rank - rank % 2 + 1], [rank % 2, rank % 2 + 2]
        assert f"rank={rank} tp={tp} fsdp={fsdp} strategy=FULL_SHARD numel=72" in output, output
