"""The SDK's surface as SageMaker users know it: framework classes, how hyperparameters are encoded,
the forms `inputs` takes. Checked through plan(), which builds the job without running it."""

from __future__ import annotations

import json
import warnings

import pytest

from shipyard import Estimator, TrainingInput
from shipyard.pytorch import PyTorch
from shipyard.sklearn import SKLearn
from shipyard.tensorflow import TensorFlow
from shipyard.xgboost import XGBoost


@pytest.fixture
def src(tmp_path, monkeypatch):
    monkeypatch.setenv("SHIPYARD_HOME", str(tmp_path / "home"))
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('hi')\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.csv").write_text("1\n")
    return source


def _hps(estimator, inputs=None, job_name="plan-job") -> dict[str, str]:
    (launch,) = estimator.plan(inputs, job_name=job_name)
    return launch.instance.config.hyperparameters


def test_framework_estimators_json_encode_and_add_script_mode_keys(src):
    hps = _hps(PyTorch(entry_point="train.py", source_dir=str(src), hyperparameters={"lr": 0.1, "opt": "adam"}))
    assert hps["lr"] == "0.1" and hps["opt"] == '"adam"'
    assert json.loads(hps["sagemaker_program"]) == "train.py"
    assert json.loads(hps["sagemaker_submit_directory"]).endswith("/plan-job/source/sourcedir.tar.gz")
    assert json.loads(hps["sagemaker_job_name"]) == "plan-job"
    assert hps["sagemaker_container_log_level"] == "20"


def test_generic_estimator_without_source_dir_uses_str(src):
    est = Estimator(entry_point=str(src / "train.py"), hyperparameters={"opt": "adam", "d": {"a": 1}})
    hps = _hps(est)
    assert hps["opt"] == "adam" and hps["d"] == "{'a': 1}"
    assert json.loads(hps["sagemaker_program"]) == "train.py"


def test_distribution_becomes_sagemaker_hyperparameters(src):
    est = PyTorch(entry_point="train.py", source_dir=str(src), instance_type="local",
                  distribution={"pytorchddp": {"enabled": True, "processes_per_host": 3}})
    hps = _hps(est)
    assert json.loads(hps["sagemaker_pytorch_ddp_enabled"]) is True
    assert json.loads(hps["sagemaker_mpi_num_of_processes_per_host"]) == 3
    assert json.loads(hps["sagemaker_instance_type"]) == "local"
    assert "sagemaker_torch_distributed_enabled" not in hps


def test_disabled_strategy_emits_nothing(src):
    est = PyTorch(entry_point="train.py", source_dir=str(src), distribution={"torch_distributed": {"enabled": False}})
    (launch,) = est.plan(job_name="plan-job")
    assert launch.launcher == "single"


@pytest.mark.parametrize(
    ("model_dir", "output_path", "expected"),
    [(None, "s3://bucket/out", "s3://bucket/out/plan-job/model"), (None, "file:///tmp/out", "/tmp/out/plan-job/model"),
     (None, "/tmp/out", "/tmp/out/plan-job/model"), ("s3://mine/m", None, "s3://mine/m"), (False, None, None)],
)
def test_tensorflow_model_dir(src, model_dir, output_path, expected, monkeypatch):
    monkeypatch.setattr("shipyard.sdk.estimator._check_writable", lambda field, uri: None)  # no S3 here
    est = TensorFlow(entry_point="train.py", source_dir=str(src), model_dir=model_dir, output_path=output_path)
    hps = _hps(est)
    assert (json.loads(hps["model_dir"]) if "model_dir" in hps else None) == expected


def test_inputs_forms(src, tmp_path):
    data = f"file://{tmp_path / 'data'}"
    est = PyTorch(entry_point="train.py", source_dir=str(src))
    for inputs, names in ((data, ["training"]), (TrainingInput(data), ["training"]),
                          ({"a": data, "b": TrainingInput(data, distribution="ShardedByS3Key")}, ["a", "b"])):
        (launch,) = est.plan(inputs, job_name="plan-job")
        assert [c.name for c in launch.instance.config.channels] == names


@pytest.mark.parametrize("cls", [PyTorch, TensorFlow, SKLearn, XGBoost])
def test_framework_version_mismatch_is_said_clearly(src, cls):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cls(entry_point="train.py", source_dir=str(src), framework_version="0.0.1", py_version="py311")
    messages = [str(w.message) for w in caught]
    assert any("framework_version='0.0.1'" in m for m in messages), messages


def test_installed_framework_version_matches_quietly(src):
    import torch

    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PyTorch(entry_point="train.py", source_dir=str(src), framework_version=version, py_version="py311")


def test_model_data_before_fit_is_an_error(src):
    with pytest.raises(ValueError, match="call fit"):
        PyTorch(entry_point="train.py", source_dir=str(src)).model_data
