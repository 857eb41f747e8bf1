"""The HuggingFace estimator as SageMaker's SDK defines it: its arguments (py_version first), its version
checks, and the job it plans (a PyTorch script-mode job under torchrun, recorded as "huggingface")."""

from __future__ import annotations

import json
import re
import warnings

import pytest

from shipyard.errors import ValidationError
from shipyard.huggingface import HuggingFace

VERSIONS = {"transformers_version": "5.24", "pytorch_version": "2.13", "py_version": "py311"}   # installed here


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SHIPYARD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SHIPYARD_SANDBOX", "off")


def _estimator(script, **arguments) -> HuggingFace:
    return HuggingFace(**{"entry_point": "train.py", "source_dir": str(script), **VERSIONS, **arguments})


@pytest.mark.parametrize("strategy", ["torch_distributed", "pytorchddp"])
def test_distributed_trainer_job_plan(script, strategy):
    est = _estimator(script, instance_count=2, distribution={strategy: {"enabled": True}},
                     hyperparameters={"epochs": 2, "model_name_or_path": "/opt/ml/input/data/pretrained"})
    launches = est.plan(job_name="hf-plan")
    assert [launch.launcher for launch in launches] == [strategy] * 2
    assert [launch.argv[launch.argv.index("--node_rank") + 1] for launch in launches] == ["0", "1"]
    for launch in launches:
        assert launch.argv[-4:] == ["--epochs", "2", "--model_name_or_path", "/opt/ml/input/data/pretrained"]
        hps = launch.instance.config.hyperparameters
        flag = {"torch_distributed": "sagemaker_torch_distributed_enabled",
                "pytorchddp": "sagemaker_pytorch_ddp_enabled"}[strategy]
        assert json.loads(hps[flag]) is True and json.loads(hps["sagemaker_instance_type"]) == "local"
        # No GPU here: Accelerate must be told so, or Trainer's processes would each train alone.
        assert launch.env["ACCELERATE_USE_CPU"] == "true"
        # Nothing that makes transformers choose SageMaker's own data or model parallelism.
        assert "sagemaker_distributed_dataparallel_enabled" not in json.loads(launch.env["SM_FRAMEWORK_PARAMS"])
        assert "SM_HP_MP_PARAMETERS" not in launch.env


def test_job_records_the_versions_and_the_framework(script):
    est = _estimator(script)
    spec = est._spec(None, None, est._store())
    assert (spec.framework, spec.framework_version, spec.py_version) == ("huggingface", "5.24", "py311")
    assert spec.job_name.startswith("huggingface-pytorch-training-")
    assert (est.framework_version, est.pytorch_version, est.tensorflow_version) == ("5.24", "2.13", None)
    attached = HuggingFace._from_spec(spec)
    assert (attached.framework_version, attached.py_version, attached.entry_point) == ("5.24", "py311", "train.py")


def test_arguments_in_the_sdk_order(script):
    est = HuggingFace("py311", "train.py", "5.24", None, "2.13", source_dir=str(script))
    assert (est.py_version, est.entry_point, est.framework_version, est.pytorch_version) == (
        "py311", "train.py", "5.24", "2.13")


REFUSED = [
    ("no-transformers", {"transformers_version": None}, r"^transformers_version=None: give the transformers"),
    ("no-base", {"pytorch_version": None}, r"^pytorch_version=None: give the PyTorch version"),
    ("both-bases", {"tensorflow_version": "2.6"}, r"^tensorflow_version='2.6': give only one of"),
    ("tensorflow", {"pytorch_version": None, "tensorflow_version": "2.6"},
     r"^tensorflow_version='2.6': Hugging Face on TensorFlow is not supported"),
    ("precision", {"pytorch_version": "2.13.0"}, r"^pytorch_version='2.13.0': write transformers_version \('5.24'\) "
     r"and pytorch_version to the same precision"),
    ("no-python", {"py_version": None}, r"^py_version=None: give the Python version .*py_version='py311'"),
    ("python-form", {"py_version": "3.11"}, r"^py_version='3.11': give the Python version"),
    ("number", {"transformers_version": 5.24}, r"^transformers_version=5.24: give the version as text"),
    ("framework_version", {"framework_version": "5.24"}, r"^framework_version='5.24': HuggingFace takes "
     r"transformers_version"),
    ("tf-strategy", {"distribution": {"parameter_server": {"enabled": True}}},
     r"^distribution.parameter_server=.*is a TensorFlow strategy"),
]


@pytest.mark.parametrize(("arguments", "message"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_bad_arguments_are_refused_naming_the_fix(script, arguments, message):
    with pytest.raises(ValidationError, match=message):
        _estimator(script, **arguments)


def test_versions_not_installed_here_are_said(script):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _estimator(script, transformers_version="4.49", pytorch_version="2.5")
    messages = [str(w.message) for w in caught]
    assert any(re.match(r"transformers_version='4.49', but this machine has transformers 5\.24", m) for m in messages)
    assert any(re.match(r"pytorch_version='2.5', but this machine has torch 2\.13", m) for m in messages)


def test_installed_versions_match_quietly(script):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _estimator(script)


def test_tuner_attach_rebuilds_a_huggingface_estimator(script):
    """The tuning job's record says framework huggingface: attach() rebuilds the HuggingFace estimator, with
    no estimator_cls given (the class is the record's framework's, in the job file's frameworks registry)."""
    from shipyard.store import Store
    from shipyard.store.tuning import TuningStore
    from shipyard.tuner import ContinuousParameter, HyperparameterTuner

    est = _estimator(script, metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"}])
    tuner = HyperparameterTuner(est, "loss", {"learning_rate": ContinuousParameter(1e-5, 1e-3)},
                                objective_type="Minimize", max_jobs=2)
    TuningStore(Store()).create(tuner._spec(job_name="hf-tuning"))   # recorded, not started
    attached = HyperparameterTuner.attach("hf-tuning")
    assert type(attached.estimator) is HuggingFace
    assert (attached.estimator.framework_version, attached.estimator.py_version, attached.estimator.entry_point) == (
        "5.24", "py311", "train.py")
    assert attached.objective_metric_name == "loss" and set(attached.hyperparameter_ranges()) == {"learning_rate"}
