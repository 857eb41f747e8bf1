"""Debugger capture end to end through the SDK, across 2 instances x 2 processes (torchrun, gloo): every
rank's tensors with include_workers=all (per-rank inputs and local gradients, DDP-equal weights), only
worker_0 by default, an eval phase saved as mode eval with its own steps, and torchrun's own launcher
process not posing as a worker."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shipyard.debugger import CollectionConfig, DebuggerHookConfig, trial
from shipyard.pytorch import PyTorch
from shipyard.store.db import Store

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).parent / "scripts" / "capture_ddp.py"
WEIGHT, GRAD, INPUT = ("Net_fc1.weight", "gradient/Net_fc1.weight", "Net_input_0")


def _fit(tmp_path, name, hook_parameters):
    hook = DebuggerHookConfig(hook_parameters={"save_interval": "2", "eval.save_interval": "1", **hook_parameters},
                              collection_configs=[CollectionConfig(name=n) for n in ("weights", "gradients", "inputs")])
    est = PyTorch(entry_point=str(SCRIPT), instance_count=2, framework_version="2.3", py_version="py311",
                  distribution={"torch_distributed": {"enabled": True, "processes_per_host": 2}},
                  output_path=str(tmp_path / "out"), hyperparameters={"steps": 4, "eval_batches": 2},
                  debugger_hook_config=hook, stop_grace_seconds=5)
    est.fit(job_name=name, wait=True, logs=False)
    return trial(name)


def _hooked_workers(name):
    """The worker each process's hook said it saves as, from both instances' logs."""
    marker = "shipyard: debugger hook saving tensors as "
    return sorted(line.split(marker)[1].strip() for host in ("algo-1", "algo-2")
                  for line in Store().log_path(name, host).read_text().splitlines() if marker in line)


def test_every_rank_of_two_instances_and_an_eval_phase(home, tmp_path):
    t = _fit(tmp_path, "capture-all", {"include_workers": "all"})
    workers = ["worker_0", "worker_1", "worker_2", "worker_3"]
    assert t.workers() == workers
    # the torchrun launchers (one per instance, no RANK) installed no hook: 4 hooks, one per rank
    assert _hooked_workers("capture-all") == workers

    # modes: 4 train steps (saved 0, 2), then 2 eval forwards, global steps 4 and 5
    assert t.steps() == [0, 2, 4, 5]
    assert t.steps(mode="train") == [0, 2] and t.steps(mode="eval") == [0, 1]
    assert [t.mode_of(s) for s in (4, 5)] == [("eval", 0), ("eval", 1)]
    assert t.global_step("eval", 1) == 5
    eval_names = t.tensor_names(mode="eval")
    assert INPUT in eval_names and "MSELoss_output_0" in eval_names
    assert not [n for n in eval_names if n.startswith("gradient/")]

    for step in (0, 2):
        assert t.tensor(WEIGHT).workers(step) == workers
        weights = [t.tensor(WEIGHT).value(step, worker=w) for w in workers]
        grads = [t.tensor(GRAD).value(step, worker=w) for w in workers]
        inputs = [t.tensor(INPUT).value(step, worker=w) for w in workers]
        for w in range(1, 4):
            np.testing.assert_array_equal(weights[w], weights[0])  # DDP keeps the replicas equal
            assert not np.allclose(grads[w], grads[0])  # local gradients, before the allreduce
            assert not np.allclose(inputs[w], inputs[0])  # each rank's own data
    # the eval steps saw the trained weights, equal on every rank, and per-rank eval inputs
    evaluated = [t.tensor(WEIGHT).value(1, mode="eval", worker=w) for w in workers]
    assert all(np.array_equal(e, evaluated[0]) for e in evaluated)
    assert not np.array_equal(evaluated[0], t.tensor(WEIGHT).value(0))
    assert not np.allclose(t.tensor(INPUT).value(0, mode="eval", worker="worker_0"),
                           t.tensor(INPUT).value(1, mode="eval", worker="worker_0"))


def test_one_worker_by_default(home, tmp_path):
    t = _fit(tmp_path, "capture-one", {})
    assert t.workers() == ["worker_0"]
    assert _hooked_workers("capture-one") == ["worker_0"]
    assert t.steps(mode="eval") == [0, 1]
