"""Bad input gets a clear error before anything runs: nothing is written to the store, nothing is
uploaded, no process starts."""

from __future__ import annotations

import pytest

from shipyard import Estimator
from shipyard.errors import CapacityError, ConflictError, ValidationError
from shipyard.pytorch import PyTorch
from shipyard.store import Store


def _nothing_happened(home):
    assert Store(home).list_jobs() == []
    assert not (home / "output").exists()


def test_misspelled_argument_names_the_closest(script):
    with pytest.raises(ValidationError, match="did you mean 'instance_count'"):
        PyTorch(entry_point="train.py", source_dir=str(script), instance_cont=2)


def test_meaningless_argument_warns_once(script):
    with pytest.warns(UserWarning, match="ignores 'volume_kms_key'"):
        PyTorch(entry_point="train.py", source_dir=str(script), volume_kms_key="arn:aws:kms:us-east-1:1:key/x")


def test_unbuilt_capability_is_refused_not_ignored(script):
    with pytest.raises(ValidationError, match="model_uri.*not supported"):
        PyTorch(entry_point="train.py", source_dir=str(script), model_uri="s3://bucket/model.tar.gz")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"use_spot_instances": True, "checkpoint_s3_uri": "file:///tmp/ckpt"}, "needs max_wait"),
     ({"use_spot_instances": True, "max_run": 100, "max_wait": 50, "checkpoint_s3_uri": "file:///tmp/c"},
      r"max_wait \(50\) must be >= max_run \(100\)"),
     ({"use_spot_instances": True, "max_run": 100, "max_wait": 200}, "without checkpoint_s3_uri"),
     ({"max_wait": 200}, "spot jobs only")],
)
def test_spot_rules(home, script, kwargs, message):
    with pytest.raises(ValidationError, match=message):
        PyTorch(entry_point="train.py", source_dir=str(script), **kwargs).fit()
    _nothing_happened(home)


@pytest.mark.parametrize("count", [0, -1, 1.5, "2", True])
def test_instance_count_must_be_positive_int(script, count):
    with pytest.raises(ValidationError, match="instance_count"):
        PyTorch(entry_point="train.py", source_dir=str(script), instance_count=count)


def test_unknown_distribution_key(script):
    with pytest.raises(ValidationError, match="did you mean 'torch_distributed'"):
        PyTorch(entry_point="train.py", source_dir=str(script), distribution={"torch_distributd": {"enabled": True}})


def test_distribution_not_built_yet_is_clear(script):
    with pytest.raises(ValidationError, match="pytorchxla.*not supported by shipyard yet"):
        PyTorch(entry_point="train.py", source_dir=str(script), distribution={"pytorchxla": {"enabled": True}})


def test_unknown_instance_type(script):
    with pytest.raises(ValidationError, match="did you mean 'ml.m5.xlarge'"):
        PyTorch(entry_point="train.py", source_dir=str(script), instance_type="ml.m5.xlarg")


def test_not_json_serialisable_hyperparameter(script):
    with pytest.raises(ValidationError, match=r"hyperparameters\['model'\]"):
        PyTorch(entry_point="train.py", source_dir=str(script), hyperparameters={"model": object()})


def test_missing_entry_point_and_source_dir(home, script, tmp_path):
    with pytest.raises(ValidationError, match="entry_point='nope.py'"):
        PyTorch(entry_point="nope.py", source_dir=str(script)).fit()
    with pytest.raises(ValidationError, match="source_dir.*no such directory"):
        PyTorch(entry_point="train.py", source_dir=str(tmp_path / "missing")).fit()
    with pytest.raises(ValidationError, match="entry_point"):
        Estimator(entry_point=None)
    _nothing_happened(home)


def test_channel_that_does_not_exist(home, script, tmp_path):
    est = PyTorch(entry_point="train.py", source_dir=str(script))
    with pytest.raises(ValidationError, match=r"inputs\['train'\].*does not exist"):
        est.fit({"train": f"file://{tmp_path}/no-such-data"})
    with pytest.raises(ValidationError, match=r"inputs\['train'\]"):
        est.fit({"train": "nosuchscheme://bucket/data"})
    _nothing_happened(home)


@pytest.mark.parametrize("name", ["-leading", "trailing-", "has_underscore", "x" * 64])
def test_invalid_job_name(home, script, name):
    with pytest.raises(ValidationError, match="job_name"):
        PyTorch(entry_point="train.py", source_dir=str(script)).fit(job_name=name, wait=False)
    _nothing_happened(home)


def test_duplicate_job_name(home, script):
    est = PyTorch(entry_point="train.py", source_dir=str(script), stop_grace_seconds=1)
    est.fit(job_name="same-name", wait=True, logs=False)
    with pytest.raises(ConflictError, match="same-name"):
        est.fit(job_name="same-name", wait=False)


def test_metric_regex_without_group(script, home):
    est = PyTorch(entry_point="train.py", source_dir=str(script),
                  metric_definitions=[{"Name": "loss", "Regex": "loss=[0-9.]+"}])
    with pytest.raises(ValidationError, match="no capture group"):
        est.fit()
    _nothing_happened(home)


def test_instance_type_this_machine_cannot_provide(script, home):
    est = PyTorch(entry_point="train.py", source_dir=str(script), instance_type="ml.p4d.24xlarge")
    with pytest.raises(CapacityError, match="GPU"):
        est.fit()
    _nothing_happened(home)


def test_torchrun_needs_a_python_program(tmp_path):
    (tmp_path / "run.sh").write_text("echo hi\n")
    with pytest.raises(ValidationError, match="Python programs only"):
        PyTorch(entry_point="run.sh", source_dir=str(tmp_path), distribution={"torch_distributed": {"enabled": True}})
