"""The TensorBoard export, read back with TensorBoard's own reader (EventAccumulator): every value equals
the trial's, per mode, at the mode step."""
from __future__ import annotations

import sys
import types

import pytest

from shipyard.debugger import trial
from shipyard.debugger.tensorboard import export


@pytest.fixture
def accumulator(monkeypatch):
    # tensorboard's reader imports TensorFlow for file access when it is installed (seconds, and noisy);
    # `tensorboard.compat.notf` is tensorboard's own switch to its TensorFlow-free stub.
    if "tensorflow" not in sys.modules:
        monkeypatch.setitem(sys.modules, "tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def load(path):
        acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "histograms": 0})
        acc.Reload()
        return acc

    return load


def test_export_reads_back_equal_to_the_trial(loop, tmp_path, accumulator):
    run = loop({"save_interval": "2", "reductions": "mean,abs_max"},
               {"weights": {"save_histogram": "true"}, "gradients": {"save_raw_tensor": "true"}})
    run.train(4)
    run.evaluate(3)
    run.close()
    t = trial(str(tmp_path / "tensors"))
    files = export(t, tmp_path / "tb")
    assert sorted(p.parent.relative_to(tmp_path / "tb").as_posix() for p in files) == [
        "EVAL/worker_0", "TRAIN/worker_0"]

    train = accumulator(tmp_path / "tb" / "TRAIN" / "worker_0")
    loss = train.Scalars("MSELoss_output_0")
    assert [e.step for e in loss] == t.tensor("MSELoss_output_0").steps(mode="train") == [0, 2]
    for event in loss:
        assert event.value == pytest.approx(float(t.tensor("MSELoss_output_0").value(event.step, mode="train")))
    weight = t.tensor("Net_fc1.weight")
    for event in train.Histograms("Net_fc1.weight"):
        edges, counts = weight.histogram(event.step, mode="train")
        assert list(event.histogram_value.bucket) == counts
        assert list(event.histogram_value.bucket_limit) == pytest.approx(edges[1:])
        assert event.histogram_value.min == pytest.approx(edges[0])
    assert len(train.Histograms("Net_fc1.weight")) == 2
    means = train.Scalars("gradient/Net_fc2.weight/mean")
    assert [e.value for e in means] == pytest.approx(
        [t.tensor("gradient/Net_fc2.weight").reduction_value(s, "mean", mode="train") for s in (0, 2)])
    # raw gradients without a stored histogram: the histogram is computed from the value the same way
    grad_hist = train.Histograms("gradient/Net_fc2.weight")[0].histogram_value
    assert list(grad_hist.bucket) == t.tensor("gradient/Net_fc2.weight").histogram(0, mode="train")[1]

    evaluation = accumulator(tmp_path / "tb" / "EVAL" / "worker_0")
    assert [e.step for e in evaluation.Scalars("MSELoss_output_0")] == [0, 2]
    assert evaluation.Scalars("MSELoss_output_0")[1].value == pytest.approx(
        float(t.tensor("MSELoss_output_0").value(2, mode="eval")))


def test_cli_exports_a_path_and_names_an_empty_one(loop, tmp_path, accumulator):
    from click.testing import CliRunner

    from shipyard.cli.main import cli

    run = loop({"save_interval": "1"})
    run.train(2)
    run.close()
    result = CliRunner().invoke(cli, ["debugger", "tensorboard", str(tmp_path / "tensors"), "--out",
                                      str(tmp_path / "tb")])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(tmp_path / "tb")
    assert [e.step for e in accumulator(tmp_path / "tb" / "TRAIN" / "worker_0").Scalars("MSELoss_output_0")] == [0, 1]
    empty = CliRunner().invoke(cli, ["debugger", "tensorboard", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")])
    assert empty.exit_code == 2 and "no saved tensors" in empty.output
