"""SageMaker model parallel v1 (`smdistributed.modelparallel.torch`) served by shipyard.parallel.

Two gloo ranks train with an SMP v1 script (this file, run as a script: `_worker`) under `partitions: 2`
(pipeline stages) and `tensor_parallel_degree: 2`, and end with the parameters and the per-step losses
of the same model trained in one process on the same batches, every rank holding only its part (stage
layers, weight slices). In-process tests (a world of one) cover the step's micro-batches, StepOutput,
saving, and the errors for what is misused or not served. The 2-instance job is tests/e2e/test_smp_v1.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from shipyard.errors import ValidationError  # noqa: E402

ROOT = Path(__file__).parents[2]
INJECT = ROOT / "shipyard" / "runtime" / "inject"
STEPS, BATCH = 4, 16


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(STEPS * BATCH, 16, generator=generator), torch.randn(STEPS * BATCH, 4, generator=generator)


def _worker(out: Path) -> None:
    """A script in SMP v1's documented style; the optimizer is built before the model is wrapped."""
    import smdistributed.modelparallel.torch as smp
    from torch.distributed.tensor import DTensor

    smp.init()
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model = smp.DistributedModel(model)
    optimizer = smp.DistributedOptimizer(optimizer)

    @smp.step
    def train_step(model, data, target):
        loss = F.mse_loss(model(data), target)
        model.backward(loss)
        return loss

    x, y = _data()
    per = BATCH // smp.dp_size()
    losses = []
    for step in range(STEPS):
        rows = slice(step * BATCH + smp.dp_rank() * per, step * BATCH + (smp.dp_rank() + 1) * per)
        optimizer.zero_grad()
        losses.append(train_step(model, x[rows], y[rows]).reduce_mean().item())
        optimizer.step()
    local = {k: list(v.to_local().shape if isinstance(v, DTensor) else v.shape)
             for k, v in model.local_state_dict().items() if isinstance(v, torch.Tensor)}
    torch.save({"full": model.state_dict(), "local": local, "losses": losses,
                "ranks": [smp.rank(), smp.pp_rank(), smp.tp_rank(), smp.dp_rank(), smp.mp_rank()]},
               out / f"rank{smp.rank()}.pt")


def _reference() -> tuple[dict[str, torch.Tensor], list[float]]:
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = _data()
    losses = []
    for step in range(STEPS):
        loss = F.mse_loss(model(x[step * BATCH:(step + 1) * BATCH]), y[step * BATCH:(step + 1) * BATCH])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return model.state_dict(), losses


STAGE_KEYS = [["0.bias", "0.weight", "2.bias", "2.weight"], ["4.bias", "4.weight"]]
# tensor parallelism: 0 column-parallel with 2 row-parallel (an MLP), 4 column-parallel with its output gathered
TP_SHAPES = {"0.weight": [16, 16], "0.bias": [16], "2.weight": [32, 16], "2.bias": [32], "4.weight": [2, 32],
             "4.bias": [2]}
SCENARIOS = {
    "pipeline": {"partitions": 2, "microbatches": 2, "pipeline": "interleaved"},
    "tensor_parallel": {"tensor_parallel_degree": 2, "microbatches": 2},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_two_ranks_train_like_one_process_each_holding_its_part(tmp_path, name):
    sys.path.insert(0, str(ROOT / "tests" / "parallel"))
    from ranks import run_ranks

    run_ranks(2, [__file__, str(tmp_path)], tmp_path, extra_env={
        "SM_HP_MP_PARAMETERS": json.dumps(SCENARIOS[name]), "PYTHONPATH": f"{INJECT}:{ROOT}"})
    expected, losses = _reference()
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    for r, record in enumerate(ranks):
        full = record["full"]
        assert full.pop("_smp_is_partial") is False
        assert sorted(full) == sorted(expected)
        for key, value in full.items():
            assert (value - expected[key]).abs().max().item() < 1e-5, (name, r, key)
        # the loss comes back on every rank, the stages' included
        assert record["losses"] == pytest.approx(losses, abs=1e-5)
    if name == "pipeline":  # [rank, pp_rank, tp_rank, dp_rank, mp_rank]
        assert [record["ranks"] for record in ranks] == [[0, 0, 0, 0, 0], [1, 1, 0, 0, 1]]
        assert [sorted(record["local"]) for record in ranks] == STAGE_KEYS
    else:
        assert [record["ranks"] for record in ranks] == [[0, 0, 0, 0, 0], [1, 0, 1, 0, 1]]
        assert all(record["local"] == TP_SHAPES for record in ranks)


# -- a world of one, in this process ------------------------------------------------------------------


@pytest.fixture
def smp(monkeypatch):
    """The served module, in a fresh state: no arrangement, model or process group left behind."""
    from shipyard.runtime import served_libraries

    served_libraries.install()
    for name in [n for n in list(sys.modules) if n.startswith("smdistributed.modelparallel")]:
        monkeypatch.delitem(sys.modules, name)
    import smdistributed.modelparallel.torch as module

    for variable in ("SM_HP_MP_PARAMETERS", "RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("SM_HP_MP_PARAMETERS", json.dumps({"microbatches": 2}))
    yield module
    import torch.distributed as dist

    from shipyard.parallel import preparation

    preparation._prepared.clear()
    if dist.is_initialized():
        dist.destroy_process_group()


def test_calls_before_init_say_to_call_init(smp):
    with pytest.raises(ValidationError, match=r"smp.rank: call smp.init\(\) first"):
        smp.rank()
    with pytest.raises(ValidationError, match="smp.DistributedModel: call smp.init"):
        smp.DistributedModel(_model())


def test_replicas_without_ddp_are_refused(smp, monkeypatch):
    from shipyard.parallel import process_group

    monkeypatch.setenv("SM_HP_MP_PARAMETERS", json.dumps({"ddp": False}))
    monkeypatch.setattr(process_group, "world_size", lambda: 2)  # two replicas of the whole model
    with pytest.raises(ValidationError, match="mp_parameters.ddp=False: 2 ranks .* make 2 model replicas"):
        smp.init()


def test_step_runs_each_micro_batch_and_gathers_what_it_returns(smp):
    smp.init()
    assert (smp.rank(), smp.size(), smp.dp_size(), smp.pp_size(), smp.tp_size(), smp.mp_size()) == (0, 1, 1, 1, 1, 1)
    model = smp.DistributedModel(_model())
    optimizer = smp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    seen = []

    @smp.step(non_split_inputs=["scale"], input_split_axes={"target": 0})
    def train_step(model, data, target, scale):
        seen.append((data.shape[0], scale))
        output = model(data)
        loss = F.mse_loss(output, target) * scale
        model.backward(loss)
        return {"output": output, "loss": loss, "rows": data.shape[0]}

    x, y = _data()
    result = train_step(model, x[:BATCH], y[:BATCH], 1.0)
    assert seen == [(BATCH // 2, 1.0)] * 2
    assert isinstance(result["loss"], smp.StepOutput) and len(result["loss"]) == 2
    assert not result["output"].concat().requires_grad  # detach_outputs=True
    assert list(result["rows"]) == [BATCH // 2] * 2
    reference = _model()
    expected = F.mse_loss(reference(x[:BATCH]), y[:BATCH])
    assert result["loss"].reduce_mean().item() == pytest.approx(expected.item(), abs=1e-6)
    assert torch.allclose(result["output"].concat(), reference(x[:BATCH]), atol=1e-6)
    # gradients are averaged over the micro-batches: one step equals the whole batch's
    expected.backward()
    optimizer.step()
    torch.optim.SGD(reference.parameters(), lr=0.1).step()
    for (name, p), q in zip(model.local_named_parameters(), reference.parameters()):
        assert torch.allclose(p, q, atol=1e-6), name
    assert model.partitioned and model.local_state_dict()["_smp_is_partial"] is True


def test_misuse_is_named(smp):
    smp.init()
    model = smp.DistributedModel(_model())
    with pytest.raises(ValidationError, match="smp.DistributedModel=.*only one model"):
        smp.DistributedModel(_model())
    with pytest.raises(ValidationError, match="smp.DistributedModel call: call it inside a function decorated"):
        model(torch.zeros(2, 16))

    @smp.step
    def forgets_backward(model, data):
        return model(data).sum()

    with pytest.raises(ValidationError, match="did not call model.backward"):
        forgets_backward(model, torch.zeros(4, 16))
    with pytest.raises(ValidationError, match=r"smp.step argument 'data'=\(3, 16\): .* microbatches=2"):
        forgets_backward(model, torch.zeros(3, 16))
    model.eval()
    with torch.no_grad():  # an evaluation step needs no backward
        assert forgets_backward(model, torch.zeros(4, 16)).reduce_sum().shape == ()
    with pytest.raises(ValidationError, match="is not an argument of"):
        smp.step(non_split_inputs=["mask"])(lambda model, data: None)


def test_options_that_cannot_be_honoured_are_refused(smp, monkeypatch):
    smp.init()
    with pytest.raises(ValidationError, match="smp.DistributedModel=.*trace_devise.*did you mean 'trace_device'"):
        smp.DistributedModel(_model(), trace_devise="cpu")
    with pytest.raises(ValidationError, match="smp.DistributedModel.backward_passes_per_step=2: only 1 is served"):
        smp.DistributedModel(_model(), backward_passes_per_step=2)
    with pytest.raises(ValidationError, match="smp.partition: manual placement is not served"):
        smp.partition(1)
    with pytest.raises(ValidationError, match="smp.tensor_parallelism"):
        with smp.tensor_parallelism(enabled=False):
            pass
    with pytest.raises(ValidationError, match="dynamic_loss_args=.*scale_windw.*did you mean 'scale_window'"):
        smp.DistributedOptimizer(torch.optim.SGD(_model().parameters(), lr=0.1), dynamic_loss_args={"scale_windw": 1})


def test_save_load_and_checkpoints_per_model_parallel_rank(smp, tmp_path):
    smp.init()
    model = smp.DistributedModel(_model())
    optimizer = smp.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-2))

    @smp.step
    def train_step(model, data, target):
        loss = F.mse_loss(model(data), target)
        model.backward(loss)
        return loss

    x, y = _data()
    train_step(model, x[:BATCH], y[:BATCH])
    optimizer.step()
    smp.save({"model": model.local_state_dict()}, str(tmp_path / "checkpoint.pt"), partial=True)
    assert (tmp_path / "checkpoint.pt_0").is_file()  # the mp_rank's own file
    assert smp.load(str(tmp_path / "checkpoint.pt"))["model"]["4.bias"].shape == (4,)
    smp.save_checkpoint(str(tmp_path / "ckpt"), tag="step1", model=model, optimizer=optimizer,
                        user_content={"step": 1})
    assert (tmp_path / "ckpt" / "newest").read_text() == "step1"
    saved = {k: v.clone() for k, v in model.local_state_dict().items() if isinstance(v, torch.Tensor)}
    train_step(model, x[BATCH:2 * BATCH], y[BATCH:2 * BATCH])
    optimizer.step()
    assert smp.resume_from_checkpoint(str(tmp_path / "ckpt")) == {"step": 1}
    for key, value in model.local_state_dict().items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, saved[key]), key
    assert optimizer.state_dict()["mp_ranks"][0]["state"]  # Adam's moments came back too


if __name__ == "__main__":
    _worker(Path(sys.argv[1]))
