"""save_checkpoint / load_checkpoint: the marker convention of shipyard's checkpoint sync, the step that
comes back, and (on 2 ranks) a resumed run that continues exactly where the saved one was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import shipyard.parallel as sp
from shipyard.contract.layout import MARKER

sys.path.insert(0, str(Path(__file__).parent))
from ranks import run_ranks  # noqa: E402

WORKER = str(Path(__file__).parent / "checkpoint_worker.py")
AGREEMENT_WORKER = str(Path(__file__).parent / "agreement_worker.py")


def _model_and_optimizer(**parameters):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    return sp.prepare(model, torch.optim.Adam(model.parameters(), lr=0.1), **parameters)


def _step(model, optimizer):
    model(torch.ones(3, 4)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def test_round_trip_marks_complete_and_returns_the_step(tmp_path):
    model, optimizer = _model_and_optimizer()
    assert sp.load_checkpoint(tmp_path, model, optimizer) == 0  # nothing yet: a fresh start
    _step(model, optimizer)
    directory = sp.save_checkpoint(tmp_path, model, optimizer, step=7)
    assert directory == tmp_path / "step-7"
    assert (directory / MARKER).exists() and (directory / MARKER).stat().st_size == 0
    assert json.loads((directory / "meta.json").read_text())["step"] == 7
    assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")]
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    _step(model, optimizer)
    assert sp.load_checkpoint(tmp_path, model, optimizer) == 7
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())
    assert optimizer.state_dict()["state"][0]["step"] == 1


def test_incomplete_checkpoints_are_skipped_and_keep_last_prunes(tmp_path):
    model, optimizer = _model_and_optimizer()
    for step in (1, 2, 3):
        sp.save_checkpoint(tmp_path, model, optimizer, step=step, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-2", "step-3"]
    (tmp_path / "step-10").mkdir()  # a newer one interrupted before its marker
    (tmp_path / "step-10" / "meta.json").write_text('{"step": 10}')
    assert sp.load_checkpoint(tmp_path, model, optimizer) == 3


def test_optimizer_wrapper_state_survives(tmp_path):
    model, optimizer = _model_and_optimizer(gradient_accumulation_steps=3)
    model(torch.ones(3, 4)).sum().backward()
    optimizer.step()  # one micro-batch into a window of three
    sp.save_checkpoint(tmp_path, model, optimizer, step=0)
    model, optimizer = _model_and_optimizer(gradient_accumulation_steps=3)
    sp.load_checkpoint(tmp_path, model, optimizer)
    assert optimizer.micro_step == 1


NAMES = ["fsdp", "zero1", "fp16", "gradient_accumulation", "pipeline_simple", "tensor_parallel"]


@pytest.mark.slow
def test_resumed_training_continues_exactly_on_two_ranks(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    run_ranks(2, [WORKER, str(tmp_path / "ckpt"), str(out), *NAMES], out)
    for name in NAMES:
        assert (tmp_path / "ckpt" / name / "step-2" / MARKER).exists()
        for rank in range(2):
            result = torch.load(out / f"{name}-rank{rank}.pt")
            assert result["step"] == 2
            assert result["a"].keys() == result["b"].keys()
            for key in result["a"]:
                assert torch.allclose(result["a"][key], result["b"][key], atol=1e-6), (name, rank, key)


def test_a_marked_checkpoint_missing_a_file_is_skipped_for_the_previous_whole_one(tmp_path):
    model, optimizer = _model_and_optimizer()
    for step in (1, 2, 3, 4):
        _step(model, optimizer)
        sp.save_checkpoint(tmp_path, model, optimizer, step=step)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    next((tmp_path / "step-4").glob("*.distcp")).unlink()  # marked, but a shard never arrived
    (tmp_path / "step-3" / ".metadata").unlink()            # marked, but DCP's index never arrived
    shard = next((tmp_path / "step-2").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:-1])              # marked, but a shard arrived cut short
    _step(model, optimizer)
    assert sp.load_checkpoint(tmp_path, model, optimizer) == 1
    assert not all(torch.equal(saved[k], v) for k, v in model.state_dict().items())  # step 4's are gone


def test_parallel_checkpoints_do_not_import_the_checkpoint_sync():
    code = "import sys, shipyard.parallel.checkpoint; assert 'shipyard.runtime.checkpoints' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_ranks_that_see_different_checkpoints_agree_on_the_newest_whole_on_all(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    run_ranks(2, [AGREEMENT_WORKER, str(tmp_path / "ckpt"), str(out)], out)
    for rank in range(2):
        assert torch.load(out / f"rank{rank}.pt") == {"step": 1, "values": [1.0]}, rank
