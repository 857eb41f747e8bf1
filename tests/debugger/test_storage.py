"""The storage round trip: a Hook on a small model in this process writes the documented layout, and a
trial reads back names, steps, values, reductions, histograms and modes equal to what the model had."""
from __future__ import annotations

import json

import numpy as np
import pytest

from shipyard.contract.debugger import storage
from shipyard.debugger import trial
from shipyard.rules.debugger.trials import TensorUnavailable


def test_layout_values_and_reductions_round_trip(loop, tmp_path):
    out = tmp_path / "tensors"
    run = loop({"save_interval": "2"},
               {"weights": {}, "gradients": {"reductions": "mean,abs_max,l2", "save_raw_tensor": "true"},
                "biases": {"reductions": "max"}, "inputs": {}, "relu_output": {"save_histogram": "true"}})
    weights_before, bias_before = {}, {}
    for step in range(3):
        weights_before[step] = run.model.fc1.weight.detach().clone()
        bias_before[step] = run.model.fc1.bias.detach().clone()
        run.train(1)
    t = trial(str(out))
    assert t.steps() == [0, 2] and not t.ended()  # readable while running
    run.close()
    assert t.ended()

    assert (out / "index/000000000/000000000002_worker_0.json").exists()
    assert (out / "tensors/000000000000/worker_0.npz").exists()
    meta = json.loads((out / "collections/000000000/worker_0_collections.json").read_text())
    assert meta["_meta"]["num_workers"] == 1 and "relu_output" in meta["collections"]

    # parameters are read before the step's update, as smdebug does
    for step in (0, 2):
        np.testing.assert_array_equal(t.tensor("Net_fc1.weight").value(step), weights_before[step].numpy())
    # inputs: the model's and each module's
    np.testing.assert_array_equal(t.tensor("Net_input_0").value(0), run.x.numpy())
    np.testing.assert_array_equal(t.tensor("MSELoss_input_1").value(2), run.y.numpy())
    assert set(t.tensor_names(step=0, collection="inputs")) == {
        "Net_input_0", "fc1_input_0", "relu1_input_0", "fc2_input_0", "MSELoss_input_0", "MSELoss_input_1"}
    # reductions stored beside the raw value and equal to it
    grad = t.tensor("gradient/Net_fc1.weight")
    raw = grad.value(2)
    assert grad.reduction_value(2, "mean") == pytest.approx(float(raw.mean()), rel=1e-5)
    assert grad.reduction_value(2, "max", abs=True) == pytest.approx(float(np.abs(raw).max()), rel=1e-5)
    assert grad.reduction_values(2)["l2"] == pytest.approx(float(np.linalg.norm(raw)), rel=1e-5)
    # a reduction nobody saved is computed from the raw value, the named ones (variance, l1) included
    assert grad.reduction_value(2, "variance") == pytest.approx(float(np.var(raw)), rel=1e-5)
    assert grad.reduction_value(2, "l1", abs=True) == pytest.approx(float(np.abs(raw).sum()), rel=1e-5)
    # reductions only: no raw value, the reduction is there
    bias = t.tensor("Net_fc1.bias")
    with pytest.raises(TensorUnavailable, match="reductions only"):
        bias.value(0)
    assert bias.reduction_value(2, "max") == pytest.approx(float(bias_before[2].max()))
    assert set(bias.reduction_values(0)) == {"max"}
    # a histogram stored for relu_output (raw values are not saved for it: nothing else asked)
    relu = t.tensor("relu1_output_0")
    edges, counts = relu.histogram(0)
    assert len(edges) == storage.HISTOGRAM_BINS + 1 and sum(counts) == 6 * 8 and edges[0] == 0.0
    assert t.tensor_names(collection="relu_output") == ["relu1_output_0"]
    assert t.tensor("MSELoss_output_0").steps() == [0, 2] and t.mode_of(2) == ("train", 2)


def test_explicit_api_record_tensor_value_and_a_module_called_twice(loop, tmp_path):
    import torch

    run = loop({"save_interval": "1"}, {"custom": {"include_regex": "^my_"}, "outputs": {}})
    model, hook = run.model, run.hook
    model.train()
    run.opt.zero_grad()
    out = model(run.x) + model(run.x * 2)  # the same model twice in one step
    loss = torch.nn.functional.mse_loss(out, run.y)  # a functional loss: recorded by hand
    hook.record_tensor_value("my_loss", loss)
    hook.record_tensor_value("ignored", loss)  # matches no due collection
    loss.backward()
    run.opt.step()
    run.close()
    t = trial(str(tmp_path / "tensors"))
    assert t.steps() == [0]
    assert float(t.tensor("my_loss").value(0)) == pytest.approx(float(loss.detach()))
    assert "ignored" not in t.tensor_names()
    first, second = t.tensor("fc2_output_0").value(0), t.tensor("fc2_output_0_1").value(0)
    np.testing.assert_allclose(first + second, out.detach().numpy(), rtol=1e-6)


def test_histogram_of_values_without_a_finite_one():
    assert storage.histogram(np.array([np.nan, np.inf])) is None
    found = storage.histogram(np.array([1.0, np.nan, 2.0, 3.0]))
    assert sum(found["counts"]) == 3 and found["edges"][0] == 1.0 and found["edges"][-1] == 3.0
