"""Scripts written against SageMaker's distributed libraries for PyTorch run unmodified as real 2-instance
jobs from the SDK: SMDDP through both of its APIs (scripts/smddp_train.py), and SMP v2 (torch.sagemaker)
with tensor parallelism across the two instances (scripts/smp_v2_train.py). Each rank writes what it saw
to the model directory; the tests read it back from model.tar.gz."""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from shipyard.pytorch import PyTorch

PARALLEL = Path(__file__).parents[1] / "parallel"
sys.path.insert(0, str(PARALLEL))
import parallel_scenarios as sc  # noqa: E402
from applied import _local_shape  # noqa: E402

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).parent / "scripts"
HOSTS = ["algo-1", "algo-2"]


def _run(tmp_path, script: str, distribution: dict, helpers=(), **hyperparameters) -> list[dict]:
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(SCRIPTS / script, source / "train.py")
    for helper in helpers:
        shutil.copy(PARALLEL / helper, source)
    estimator = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=2, instance_type="local",
                        distribution=distribution, hyperparameters=hyperparameters)
    estimator.fit(logs=False)
    with tarfile.open(estimator.model_data.removeprefix("file://")) as tar:
        return sorted((json.load(tar.extractfile(m)) for m in tar.getmembers() if m.isfile()), key=lambda r: r["rank"])


def _learned(losses: list[float]) -> bool:
    return sum(losses[-5:]) < sum(losses[:5])


def test_smddp_backend_and_legacy_api_train_data_parallel_over_gloo(home, tmp_path):
    reports = _run(tmp_path, "smddp_train.py", {"smdistributed": {"dataparallel": {"enabled": True}}})
    assert [(r["rank"], r["world"], r["host"]) for r in reports] == [(0, 2, "algo-1"), (1, 2, "algo-2")]
    for r in reports:
        # torch.distributed calls the backend smddp; gloo carries it (no GPU here)
        assert (r["backend"], r["ddp_backend"], r["served_by"]) == ("smddp", "smddp", "ProcessGroupGloo")
        legacy = r["legacy"]
        assert (legacy["rank"], legacy["world"], legacy["local_rank"], legacy["local_size"]) == (r["rank"], 2, 0, 1)
        assert legacy["available"] and legacy["initialized"]
        assert (legacy["sum"], legacy["average"], legacy["max"], legacy["broadcast"], legacy["all_gather"]) == (
            3.0, 1.5, 2.0, 42.0, [0.0, 1.0])
    for api in ("torch_ddp", "legacy"):
        runs = [r[api] if api == "torch_ddp" else r[api]["ddp"] for r in reports]
        # each rank trained on its own shard, and ended with the same parameters: gradients were averaged
        assert runs[0]["first_batch"] != runs[1]["first_batch"], api
        assert runs[0]["params"] == runs[1]["params"], api
        assert all(_learned(run["losses"]) for run in runs), api


def _reference(steps: int) -> dict[str, list]:
    """The SMP v2 script's training in one process: the same model, batches and optimizer."""
    net = sc.model()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    inputs = torch.randn(4096, sc.IN, generator=torch.Generator().manual_seed(1))
    data = TensorDataset(inputs, inputs[:, :sc.OUT] * 2)
    loader = DataLoader(data, batch_size=sc.PER_RANK, sampler=DistributedSampler(data, num_replicas=1, rank=0))
    for _, (x, y) in zip(range(steps), loader):
        loss = sc.loss_fn(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {name: p.detach() for name, p in net.named_parameters()}


def test_smp_v2_tensor_parallel_splits_the_layers_across_the_two_instances(home, tmp_path):
    parameters, steps = {"tensor_parallel_degree": 2}, 20
    distribution = {"torch_distributed": {"enabled": True},  # SMP v2's documented launch
                    "smdistributed": {"modelparallel": {"enabled": True, "parameters": parameters}}}
    reports = _run(tmp_path, "smp_v2_train.py", distribution, ("evidence.py", "parallel_scenarios.py"), steps=steps)
    assert [(r["rank"], r["host"], r["backend"]) for r in reports] == [(0, "algo-1", "smddp"), (1, "algo-2", "smddp")]
    local = {name: _local_shape(parameters, name) for name in sc.model().state_dict()}
    for r in reports:
        assert r["state"] == {"rank": r["rank"], "world_size": 2, "tp_size": 2, "tp_rank": r["rank"],
                              "tensor_parallel_degree": 2, "hybrid_shard_degree": 0}
        assert r["tp_group"] == [0, 1]
        # each rank holds its half of every sliced layer, and FSDP (over the one data-parallel rank) holds
        # just that
        assert {n: e["local"] for n, e in r["params"].items()} == local
        assert all(e["mesh"] == {"tp": 2} for e in r["params"].values())
        assert r["fsdp"]["ranks"] == [r["rank"]]
        assert r["fsdp"]["numel"] == sum(torch.Size(shape).numel() for shape in local.values())
    # one model computed across both ranks: the same loss on each, and the parameters of one process
    assert reports[0]["losses"] == reports[1]["losses"] and _learned(reports[0]["losses"])
    reference = _reference(steps)
    for name, whole in reports[0]["whole"].items():
        torch.testing.assert_close(torch.tensor(whole), reference[name], atol=1e-5, rtol=1e-5, msg=name)
