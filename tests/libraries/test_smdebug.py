"""smdebug served over shipyard's debugger: the hook in processes as a job starts them (the injected
sitecustomize, SMDEBUG_CONFIG_FILE_PATH), with smdebug's one-hook-per-process semantics; the hook a
script builds itself; smdebug's Trial API over what was saved."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shipyard.contract.debugger.storage import Writer
from shipyard.errors import ValidationError
from shipyard.runtime import served_libraries

INJECT = Path(served_libraries.__file__).parent / "inject"
SCRIPT = """
import json, sys
import torch
from torch import nn
import smdebug.pytorch as smd

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.relu1, self.fc2 = nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)

    def forward(self, x):
        return self.fc2(self.relu1(self.fc1(x)))

torch.manual_seed(0)
model, loss_fn = Net(), nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
if sys.argv[1] == "explicit":
    hook = smd.Hook(out_dir=sys.argv[2], save_config=smd.SaveConfig(save_interval=2), include_collections=["weights"])
else:
    hook = smd.Hook.create_from_json_file()
hook.register_module(model)
hook.register_loss(loss_fn)
report = {"one_hook": smd.get_hook() is hook and smd.get_hook(create_if_not_exists=True) is hook, "losses": []}
if sys.argv[1] != "explicit":
    try:
        smd.Hook(out_dir=sys.argv[2])
    except ValueError as exc:
        report["second_hook"] = str(exc)
x = torch.randn(16, 4)
for step in range(3):
    optimizer.zero_grad()
    loss = loss_fn(model(x), x.sum(dim=1, keepdim=True))
    loss.backward()
    hook.save_scalar("loss", loss, sm_metric=True)
    optimizer.step()
    report["losses"].append(loss.item())
hook.set_mode(smd.modes.EVAL)
with torch.no_grad():
    model(x)
print(json.dumps(report))
"""


@pytest.fixture
def smd():
    served_libraries.install()
    import smdebug.pytorch as smd

    smd.del_hook()
    yield smd
    smd.del_hook()


def _run(tmp_path, name, *args, env=None):
    """Start the script as a job's training process would be started (the sitecustomize on its path)."""
    base = {k: v for k, v in os.environ.items() if k not in ("SMDEBUG_CONFIG_FILE_PATH", "RANK", "WORLD_SIZE")}
    return subprocess.Popen([sys.executable, "-c", SCRIPT, name, *map(str, args)], cwd=tmp_path, text=True,
                            env={**base, "PYTHONPATH": str(INJECT), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(process) -> tuple[dict, str, str]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    lines = out.splitlines()
    return json.loads(lines[-1]), "\n".join(lines[:-1]), err


def test_the_jobs_hook_is_the_one_hook_and_a_scripts_own_hook(tmp_path, smd):
    from smdebug.trials import create_trial

    config = tmp_path / "debughookconfig.json"
    config.write_text(json.dumps({"LocalPath": str(tmp_path / "tensors"), "HookParameters": {"save_interval": "2"},
                                  "CollectionConfigurations": [{"CollectionName": "weights"}]}))
    job = _run(tmp_path, "job", tmp_path / "other", env={"SMDEBUG_CONFIG_FILE_PATH": str(config)})
    explicit = _run(tmp_path, "explicit", tmp_path / "explicit")
    (report, out, err), (mine, _, _) = _finish(job), _finish(explicit)

    assert report["one_hook"] and "already installed the process's hook" in report["second_hook"]
    assert err.count("debugger hook saving tensors as worker_0") == 1
    # sm_metric: a line for metric_definitions
    assert out.splitlines()[0].startswith("scalar/loss_TRAIN: ")
    assert [float(line.split(": ")[1]) for line in out.splitlines()] == pytest.approx(report["losses"])

    trial = create_trial(str(tmp_path / "tensors"))
    assert trial.workers() == ["worker_0"]
    assert trial.steps(mode=smd.modes.TRAIN) == [0, 1, 2] and trial.steps(mode=smd.modes.EVAL) == [0]
    losses = trial.tensor("scalar/loss").values(mode=smd.modes.TRAIN)
    assert [losses[s][0] for s in (0, 1, 2)] == pytest.approx(report["losses"])
    assert trial.tensor("Net_fc1.weight").steps() == [0, 2, 3]
    # register_module/register_loss on the job's hook added nothing: every tensor once per step
    assert trial.tensor_names(step=0) == ["MSELoss_output_0", "Net_fc1.weight", "Net_fc2.weight", "scalar/loss"]
    assert not (tmp_path / "other").exists()

    explicit_trial = create_trial(str(tmp_path / "explicit"))
    assert explicit_trial.steps() == [0, 1, 2, 3]  # steps end at optimizer.step(), as the job's hook's do
    assert explicit_trial.tensor("Net_fc2.weight").steps(mode=smd.modes.TRAIN) == [0, 2]
    assert explicit_trial.tensor("scalar/loss").steps(mode=smd.modes.TRAIN) == [0, 1, 2]
    assert [explicit_trial.tensor("scalar/loss").value(s)[0] for s in (0, 1, 2)] == pytest.approx(mine["losses"])


def _write_steps(root: Path) -> None:
    writer = Writer(root, "worker_0")
    entry = {"shape": [2], "collections": ["weights"], "raw": True, "reductions": {"mean": 1.5, "abs_max": 2.0}}
    for step, (mode, mode_step) in enumerate([("train", 0), ("train", 1), ("eval", 0)]):
        writer.write_step(step, mode, mode_step, {"w": np.array([1.0, 2.0]) + step}, {"w": entry})
    writer.close()


def test_trial_api_in_smdebugs_terms(tmp_path, smd):
    from smdebug.exceptions import NoMoreData, StepUnavailable, TensorUnavailable, TensorUnavailableForStep
    from smdebug.trials import create_trial

    _write_steps(tmp_path / "out")
    trial = create_trial(str(tmp_path / "out"))
    assert trial.name == "out" and trial.steps() == [0, 1, 2] and trial.steps(smd.modes.EVAL) == [0]
    assert trial.modes() == [smd.modes.TRAIN, smd.modes.EVAL]
    assert (trial.mode(2), trial.mode_step(2), trial.global_step(smd.modes.EVAL, 0)) == (smd.modes.EVAL, 0, 2)
    assert trial.global_step(smd.modes.GLOBAL, 1) == 1
    assert trial.tensor_names(mode=smd.modes.EVAL) == ["w"] and trial.tensor_names(regex=["^x", "^w"]) == ["w"]
    assert trial.tensor_names(collection="gradients") == [] and trial.workers() == ["worker_0"]
    w = trial.tensor("w")
    assert list(w.values(mode=smd.modes.TRAIN)[1]) == [2.0, 3.0] and w.steps(mode="eval") == [0]
    assert w.reduction_values(0) == {("mean", False): 1.5, ("max", True): 2.0}
    assert float(w.reduction_value(1, "max", abs=True)) == 2.0 and float(w.reduction_value(1, "min")) == 2.0
    assert w.prev_steps(2, 1) == [1] and w.workers(0, mode=smd.modes.TRAIN) == ["worker_0"]
    assert trial.has_tensor("w") and not trial.has_tensor("v")
    with pytest.raises(TensorUnavailable, match="v was not saved"):
        trial.tensor("v")
    with pytest.raises(TensorUnavailableForStep, match="w has no value at step 5"):
        w.value(5)
    with pytest.raises(StepUnavailable, match="no eval step 3 saved"):
        trial.tensor_names(step=3, mode=smd.modes.EVAL)
    trial.wait_for_steps([0, 2])
    with pytest.raises(NoMoreData, match=r"without steps \[7\]"):
        trial.wait_for_steps([7])


def test_what_cannot_be_honoured_is_an_error(tmp_path, smd, monkeypatch):
    from smdebug.trials import create_trial

    with pytest.raises(ValidationError, match="shipyard debugger tensorboard"):
        smd.Hook(out_dir=str(tmp_path), export_tensorboard=True)
    with pytest.raises(ValidationError, match=r"include_collections\)=\['mine'\]: not built-in"):
        smd.Hook(out_dir=str(tmp_path), include_collections=["weights", "mine"])
    with pytest.raises(ValidationError, match="save_interval must be at least 1"):
        smd.SaveConfig(save_interval=0)
    with pytest.raises(ValidationError, match="unknown reduction 'median'"):
        smd.ReductionConfig(reductions=["median"])
    with pytest.raises(ValidationError, match="range_steps"):
        create_trial(str(tmp_path), range_steps=(0, 10))
    with pytest.raises(ValidationError, match="debugger_hook_config=DebuggerHookConfig"):
        smd.Hook.create_from_json_file(str(tmp_path / "missing.json"))
    assert smd.get_hook() is None and smd.get_hook(create_if_not_exists=True) is None  # smdebug is off

    hook = smd.Hook(out_dir=str(tmp_path / "t"), dry_run=True)  # saves nothing, as smdebug's dry run
    assert smd.get_hook() is hook
    with pytest.raises(ValidationError, match="unknown mode 'test'"):
        hook.set_mode("test")
    monkeypatch.setenv("SMDEBUG_CONFIG_FILE_PATH", str(tmp_path / "job.json"))
    with pytest.raises(ValidationError, match="call it without a path"):
        smd.Hook.create_from_json_file(str(tmp_path / "mine.json"))


def test_save_config_as_hook_parameters(smd):
    config = smd.SaveConfig(save_interval=10, save_steps=[1, 2], mode_save_configs={
        smd.modes.EVAL: {"save_interval": 1}, "train": smd.SaveConfigMode(end_step=50)})
    assert config.parameters() == {"save_interval": "10", "save_steps": "1,2", "eval.save_interval": "1",
                                   "train.end_step": "50"}
    assert smd.ReductionConfig(reductions=["mean"], abs_norms=["l2"], save_raw_tensor=True).parameters() == {
        "reductions": "mean,abs_l2", "save_raw_tensor": "true"}
