"""Bad input is a ValidationError naming the parameter and the valid values, raised at prepare (or
init) before anything changes; the job's configuration reaches the library from the environment."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import shipyard.parallel as sp
from shipyard.errors import ValidationError
from shipyard.parallel.config import ParallelConfig, from_environment
from shipyard.parallel.job import Job
from shipyard.parallel.process_group import choose_backend
from shipyard.parallel.strategies.pipeline import Pipeline
from shipyard.parallel.topology import Layout


def _mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_configuration_comes_from_mp_parameters_and_the_dataparallel_flag():
    env = {"SM_HP_MP_PARAMETERS": json.dumps({"sharded_data_parallel_degree": 2, "bf16": True})}
    assert from_environment(env).parameters == {"hybrid_shard_degree": 2, "bf16": True}
    env = {"SM_FRAMEWORK_PARAMS": json.dumps({"sagemaker_distributed_dataparallel_enabled": True})}
    assert from_environment(env).parameters == {"ddp": True}
    assert from_environment({}).parameters == {}
    with pytest.raises(ValidationError, match=r"mp_parameters='microbatch': unknown name; did you mean 'microbatches'"):
        from_environment({"SM_HP_MP_PARAMETERS": '{"microbatch": 2}'})


def test_arguments_are_checked_together_with_the_job_configuration(monkeypatch):
    monkeypatch.setenv("SM_HP_MP_PARAMETERS", '{"pipeline_parallel_degree": 2}')
    with pytest.raises(ValidationError, match="prepare.fp16=True: is not supported with pipeline parallelism"):
        from_environment().with_overrides({"fp16": True})


def test_explicit_arguments_override_the_job_configuration():
    config = ParallelConfig({"hybrid_shard_degree": 2, "bf16": True}).with_overrides({"hybrid_shard_degree": 4})
    assert config.parameters == {"hybrid_shard_degree": 4, "bf16": True}
    with pytest.raises(ValidationError, match="prepare='tensor_parallel_degre': unknown name; did you mean 'tensor_parallel_degree'"):
        sp.prepare(_mlp(), tensor_parallel_degre=2)


@pytest.mark.parametrize(("name", "degree", "valid"), [("tensor_parallel_degree", 3, "1, 2, 4"),
                                                       ("pipeline_parallel_degree", 8, "1, 2, 4")])
def test_a_degree_that_does_not_divide_the_world_names_the_valid_ones(name, degree, valid):
    with pytest.raises(ValidationError) as info:
        Layout.of(ParallelConfig({name: degree}), world=4, rank=0)
    assert info.value.field == f"mp_parameters.{name}" and f"valid values: {valid}" in str(info.value)


def test_hybrid_shard_degree_must_divide_the_data_parallel_size():
    with pytest.raises(ValidationError, match=r"prepare.hybrid_shard_degree=2: must divide the data-parallel "
                                              r"size 1; valid values: 1"):
        sp.prepare(_mlp(), torch.optim.SGD(_mlp().parameters(), lr=0.1), hybrid_shard_degree=2)


def _pipeline_job(model, stages: int, loss_fn=None) -> Job:
    config = ParallelConfig({"pipeline_parallel_degree": stages})
    return Job(model, None, config, Layout.of(config, world=4, rank=0), torch.device("cpu"), loss_fn)


def test_pipeline_stages_must_match_the_model():
    with pytest.raises(ValidationError, match=r"pipeline_parallel_degree=4: the model has 3 layers, so at most "
                                              r"3 stages; valid values here: 1, 2"):
        Pipeline().apply(_pipeline_job(_mlp(), 4, nn.functional.mse_loss))
    with pytest.raises(ValidationError, match="splits an nn.Sequential.*this model is a Linear"):
        Pipeline().apply(_pipeline_job(nn.Linear(2, 2), 2, nn.functional.mse_loss))
    with pytest.raises(ValidationError, match="loss_fn"):
        Pipeline().apply(_pipeline_job(_mlp(), 2))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU check needs a machine without a GPU")
def test_a_gpu_backend_on_a_cpu_job_is_refused():
    with pytest.raises(ValidationError) as info:
        choose_backend(ParallelConfig({"ddp_dist_backend": "nccl"}))
    assert info.value.field == "mp_parameters.ddp_dist_backend" and "use 'gloo' or 'auto'" in str(info.value)
    with pytest.raises(ValidationError, match="prepare.ddp_dist_backend='nccl': nccl needs a GPU"):
        sp.prepare(_mlp(), ddp_dist_backend="nccl")


def test_strategies_that_change_the_step_need_the_optimizer():
    with pytest.raises(ValidationError, match="optimizer=None: this strategy changes the optimizer step"):
        sp.prepare(_mlp(), gradient_accumulation_steps=2)
    model = _mlp()
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    with pytest.raises(ValidationError, match="has state already; call prepare.. before the first optimizer step"):
        sp.prepare(model, optimizer, shard_optimizer_state=True)


def test_the_returned_optimizer_works_with_lr_schedulers():
    model = _mlp()
    model, optimizer = sp.prepare(model, torch.optim.SGD(model.parameters(), lr=1.0), gradient_accumulation_steps=2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    before = [p.detach().clone() for p in model.parameters()]
    for _ in range(2):
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == 0.5
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_pipeline_model_refuses_a_plain_forward():
    from shipyard.parallel.strategies.pipeline import PipelineModel

    with pytest.raises(TypeError, match="sp.forward_backward"):
        PipelineModel(_mlp(), None, None)(torch.ones(1, 4))


def test_placement_strategy_arranges_model_parallel_groups():
    cluster = Layout.of(ParallelConfig({"pipeline_parallel_degree": 2}), world=4, rank=1)
    spread = Layout.of(ParallelConfig({"pipeline_parallel_degree": 2, "placement_strategy": "spread"}), 4, 1)
    assert cluster.grid[:, :, 0].tolist() == [[0, 1], [2, 3]]  # a pipeline on neighbouring ranks
    assert spread.grid[:, :, 0].tolist() == [[0, 2], [1, 3]]   # a pipeline spread over the world
    assert (cluster.dp_rank, cluster.pp_rank) == (0, 1) and (spread.dp_rank, spread.pp_rank) == (1, 0)


def test_a_closure_under_fp16_loss_scaling_is_refused_not_dropped():
    def closure():
        calls.append(1)
        return model(torch.ones(3, 4)).sum()

    calls: list[int] = []
    model = _mlp()
    model, optimizer = sp.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), fp16=True)
    with pytest.raises(ValidationError, match=r"closure='.*closure': fp16 loss scaling does not take"):
        optimizer.step(closure)
    assert optimizer.micro_step == 0 and calls == []
    model = _mlp()
    model, optimizer = sp.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    optimizer.step(closure)  # without a scaler the wrapped optimizer gets the closure
    assert calls == [1]
