"""Contract 1: the hook records modes and mode steps truly (zero-code-change EVAL detection from the
model's training flag, set_mode as the explicit API), and the trial answers with smdebug's mode API."""
from __future__ import annotations

import pytest

from shipyard.contract.debugger import modes
from shipyard.debugger import trial
from shipyard.rules.debugger.trials import TensorUnavailable

LOSS = "MSELoss_output_0"


def test_eval_forwards_are_eval_steps_with_their_own_counter(loop, tmp_path):
    run = loop({"save_interval": "1"}, {"gradients": {}})
    run.train(3)
    run.evaluate(2)
    run.train(2)
    run.evaluate(1)
    run.close()
    t = trial(str(tmp_path / "tensors"))
    assert t.steps() == list(range(8))
    assert t.steps(mode="train") == [0, 1, 2, 3, 4]
    assert t.steps(mode=modes.EVAL) == [0, 1, 2]
    assert [t.mode_of(s) for s in t.steps()] == [
        ("train", 0), ("train", 1), ("train", 2), ("eval", 0), ("eval", 1), ("train", 3), ("train", 4),
        ("eval", 2)]
    assert t.global_step("eval", 2) == 7 and t.global_step(modes.TRAIN, 3) == 5
    loss = t.tensor(LOSS)
    assert loss.steps(mode="eval") == [0, 1, 2]
    # eval step 1 used input x + 1: its loss is the one at global step 4
    assert loss.value(1, mode="eval") == loss.value(4)
    assert loss.value(1, mode="eval") != loss.value(0, mode="eval")
    assert t.tensor_names(step=0, mode="eval") == t.tensor_names(step=3)
    assert "gradient/Net_fc1.weight" in t.tensor_names(mode="train")
    assert not [n for n in t.tensor_names(mode="eval") if n.startswith("gradient/")]  # no backward in eval
    assert t.workers() == ["worker_0"] and loss.workers(2, mode="eval") == ["worker_0"]


def test_save_config_is_per_mode_on_the_mode_step(loop, tmp_path):
    run = loop({"train.save_interval": "2", "eval.save_interval": "3"})
    run.train(5)   # global 0..4, train 0..4: saves train 0, 2, 4
    run.evaluate(4)  # global 5..8, eval 0..3: saves eval 0, 3
    run.close()
    t = trial(str(tmp_path / "tensors"))
    assert t.steps(mode="train") == [0, 2, 4]
    assert t.steps(mode="eval") == [0, 3]
    assert t.steps() == [0, 2, 4, 5, 8]


def test_set_mode_is_explicit_and_wins_over_the_training_flag(loop, tmp_path):
    run = loop({"save_interval": "1"}, {"weights": {}})
    run.train(1)
    run.hook.set_mode(modes.PREDICT)
    run.model.train()  # still predict: set_mode decides from now on
    with run.torch.no_grad():
        run.model(run.x)
        run.model(run.x)
    run.hook.set_mode("train")
    run.train(1)
    run.close()
    t = trial(str(tmp_path / "tensors"))
    assert [t.mode_of(s) for s in t.steps()] == [("train", 0), ("predict", 0), ("predict", 1), ("train", 1)]
    with pytest.raises(ValueError, match="unknown mode 'test'"):
        run.hook.set_mode("test")


def test_unknown_steps_are_clear_errors(loop, tmp_path):
    run = loop({"save_interval": "1"})
    run.train(1)
    run.close()
    t = trial(str(tmp_path / "tensors"))
    with pytest.raises(TensorUnavailable, match="no eval step 0"):
        t.global_step("eval", 0)
    with pytest.raises(TensorUnavailable, match="no step 9"):
        t.mode_of(9)
    with pytest.raises(TensorUnavailable):
        t.tensor(LOSS).value(0, mode="eval")


def test_a_model_only_ever_in_eval_mode_does_not_drive_the_mode(loop, tmp_path):
    """A second model kept in eval mode (a distillation teacher) and a loss module (always in training
    mode) change neither the mode nor the steps once the model has trained."""
    from torch import nn

    run = loop({"save_interval": "1"}, {"outputs": {}})
    teacher = nn.Linear(4, 1).eval()
    run.hook.register_module(teacher)
    for _ in range(3):
        run.opt.zero_grad()
        out = run.model(run.x)
        with run.torch.no_grad():
            target = teacher(run.x)
        run.loss_fn(out, target).backward()
        run.opt.step()
    run.close()
    t = trial(str(tmp_path / "tensors"))
    assert [t.mode_of(s) for s in t.steps()] == [("train", 0), ("train", 1), ("train", 2)]
    assert "Linear_output_0" in t.tensor_names(step=2)


def test_a_model_wrapped_after_its_first_call_is_one_model_named_as_unwrapped(loop, tmp_path):
    """A script that calls its model once, then wraps it (as with DDP): the tensors keep the model's names
    and are saved once per step, and each eval forward is one EVAL step, not two."""
    from torch import nn

    from shipyard.debugger import trial

    class DistributedDataParallel(nn.Module):  # the wrapper's shape: the model as `.module`
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, x):
            return self.module(x)

    lp = loop({"save_interval": "1"}, {"weights": {}, "gradients": {}})
    lp.train(1)
    lp.model = DistributedDataParallel(lp.model)
    lp.hook.register_module(lp.model)
    lp.train(1)
    lp.evaluate(2)
    lp.close()
    t = trial(str(tmp_path / "tensors"))
    assert t.steps() == [0, 1, 2, 3] and t.steps(mode="eval") == [0, 1]
    assert t.tensor_names(step=1, collection="weights") == ["Net_fc1.weight", "Net_fc2.weight"]
    assert "gradient/Net_fc1.weight" in t.tensor_names(step=1) and "gradient/Net_fc1.weight_1" not in t.tensor_names()
