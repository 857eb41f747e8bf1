"""The bad inputs of the hardening review (issue 14), each refused through the SDK with a message that
names the field, the value and the fix, before anything is written or uploaded (docs/bad-inputs.md
lists them with their messages; tests/cli/test_bad_inputs.py sends the same through the CLI)."""

from __future__ import annotations

import math
import os
import tarfile

import pytest

from shipyard.errors import CapacityError, ValidationError
from shipyard.pytorch import PyTorch
from shipyard.store import Store


def _estimator(script, **arguments):
    return PyTorch(**{"entry_point": "train.py", "source_dir": str(script), "framework_version": "2.13",
                      "py_version": "py311", **arguments})


# (id, arguments, the message, as a regex)
REFUSED = [
    ("hyperparameters-not-a-dict", {"hyperparameters": [1, 2]}, r"^hyperparameters=\[1, 2\]: must be a dict"),
    ("hyperparameter-nan", {"hyperparameters": {"lr": math.nan}}, r"^hyperparameters\['lr'\]=nan: must be a finite number"),
    ("hyperparameter-infinity", {"hyperparameters": {"lr": [1, math.inf]}}, r"hyperparameters\['lr'\].*finite"),
    ("hyperparameter-dashes", {"hyperparameters": {"--x": 1}}, r"job.hyperparameters='--x': a name must not start with '-'"),
    ("hyperparameter-space", {"hyperparameters": {"my key": 1}}, r"'my key': a name must not .* contain whitespace"),
    ("hyperparameter-reserved", {"hyperparameters": {"sagemaker_program": "x.py"}},
     r"^hyperparameters='sagemaker_program': sagemaker_\* names are the SDK's own"),
    ("hyperparameter-too-long", {"hyperparameters": {"x": "a" * 3000}},
     r"^job.hyperparameters\['x'\]='\"a{100,}\.\.\. \(\d+ characters\): is 3002 characters; at most 2500"),
    ("hyperparameters-too-many", {"hyperparameters": {f"k{i}": i for i in range(101)}},
     r"^job.hyperparameters: 101 hyperparameters; at most 100 .*not counting shipyard's sagemaker_\* keys"),
    ("environment-contract", {"environment": {"SM_MODEL_DIR": "/x"}}, r"'SM_MODEL_DIR': SM_\* variables are the training contract's"),
    ("log-level", {"container_log_level": "LOUD"}, r"^container_log_level='LOUD': give a logging level"),
    ("two-strategies", {"distribution": {"torch_distributed": {"enabled": True}, "mpi": {"enabled": True}}},
     r"^distribution=\['mpi', 'torch_distributed'\]: a job runs one strategy"),
    ("metric-twice", {"metric_definitions": [{"Name": "loss", "Regex": "a=(.+)"}, {"Name": "loss", "Regex": "b=(.+)"}]},
     r"metric_definitions=\['loss'\]: metric names must be unique"),
    ("checkpoint-local-relative", {"checkpoint_local_path": "ckpts"}, r"checkpoint_local_path='ckpts': must be an absolute path"),
    ("output-one-slash", {"output_path": "s3:/bucket/x"}, r"^output_path='s3:/bucket/x': .*did you mean s3://bucket/x\?"),
    ("output-ftp", {"output_path": "ftp://x/y"}, r"^output_path='ftp://x/y': the scheme ftp:// is not supported"),
    ("checkpoint-ftp", {"checkpoint_s3_uri": "ftp://x/y"}, r"^checkpoint_s3_uri='ftp://x/y': the scheme ftp://"),
    ("code-location-one-slash", {"code_location": "file:/tmp/x"}, r"^code_location='file:/tmp/x'.*file:///tmp/x"),
    ("output-not-a-uri", {"output_path": 5}, r"^output_path=5: give a URI"),
    ("keep-alive-negative", {"keep_alive_period_in_seconds": -1},
     r"keep_alive_period_in_seconds=-1: must be 0-21600 seconds \(SageMaker's range\); 0 keeps no warm pool"),
    ("keep-alive-too-long", {"keep_alive_period_in_seconds": 21601}, r"keep_alive_period_in_seconds=21601: must be 0-21600"),
    ("keep-alive-with-spot", {"keep_alive_period_in_seconds": 60, "use_spot_instances": True, "max_wait": 86400,
                              "checkpoint_s3_uri": "file:///tmp/ckpt"},
     r"keep_alive_period_in_seconds=60: warm pools cannot be combined with use_spot_instances"),
    ("controller-misspelt", {"controller": "clustre"},
     r"^job.controller='clustre': unknown name; did you mean 'cluster'\?"),
    ("controller-on-cluster-locally", {"controller": "cluster"},
     r"^job.controller='cluster': runs on a Ray cluster's head, so it needs backend='ray' \(not 'local'\)"),
    ("controller-on-cluster-warm-pool", {"controller": "cluster", "backend": "ray", "keep_alive_period_in_seconds": 60},
     r"^job.keep_alive_period_in_seconds=60: warm pools are not kept for jobs whose controller is on the cluster"),
]


@pytest.mark.parametrize("arguments, message", [pytest.param(a, m, id=i) for i, a, m in REFUSED])
def test_refused_before_anything_is_written(home, script, arguments, message):
    with pytest.raises(ValidationError, match=message):
        _estimator(script, **arguments).fit(wait=False)
    assert Store(home).list_jobs() == [] and not (home / "output").exists()


def test_a_channel_uri_with_one_slash_names_the_channel(home, script):
    with pytest.raises(ValidationError, match=r"^inputs\['train'\]='s3:/b/train': .*did you mean s3://b/train"):
        _estimator(script).plan({"train": "s3:/b/train"})


def test_a_checkpoint_location_that_cannot_be_written_is_found_before_the_job(home, script, tmp_path):
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(ValidationError, match=r"checkpoint_s3_uri=.*a-file is a file, so nothing can be written"):
        _estimator(script, checkpoint_s3_uri=f"file://{tmp_path}/a-file/ckpt").fit(wait=False)
    assert Store(home).list_jobs() == []


def test_an_s3_location_that_cannot_be_written_is_found_before_the_job(home, script, s3):
    with pytest.raises(ValidationError, match=r"^output_path='s3://no-such-bucket/out': cannot write there"):
        _estimator(script, output_path="s3://no-such-bucket/out").fit(wait=False)
    _estimator(script, output_path=f"{s3.bucket('writable')}/out").plan()
    assert s3.client.list_objects_v2(Bucket="writable").get("Contents", []) == []  # the probe is removed


def test_more_local_instances_than_the_machine_runs_side_by_side(home, script, monkeypatch):
    with pytest.raises(CapacityError, match=r"^1000 x local: this machine runs at most \d+ instances side by side"):
        _estimator(script, instance_count=1000).plan()
    monkeypatch.setenv("SHIPYARD_LOCAL_MAX_INSTANCES", "3")
    _estimator(script, instance_count=3).plan()
    with pytest.raises(CapacityError, match="at most 3 instances .*raise SHIPYARD_LOCAL_MAX_INSTANCES"):
        _estimator(script, instance_count=4).plan()
    monkeypatch.setenv("SHIPYARD_LOCAL_MAX_INSTANCES", "lots")
    with pytest.raises(ValidationError, match="SHIPYARD_LOCAL_MAX_INSTANCES='lots': must be a whole number"):
        _estimator(script, instance_count=2).plan()


def test_an_absolute_entry_point_is_the_copy_in_source_dir(home, script, tmp_path):
    plan = _estimator(script, entry_point=str(script / "train.py")).plan()
    assert plan[0].env["SM_USER_ENTRY_POINT"] == "train.py"
    (tmp_path / "elsewhere.py").write_text("print('host')\n")
    with pytest.raises(ValidationError, match=r"entry_point=.*elsewhere.py.* is outside source_dir"):
        _estimator(script, entry_point=str(tmp_path / "elsewhere.py")).plan()


def test_a_link_out_of_source_dir_is_refused_unless_asked_for(home, script, tmp_path):
    (tmp_path / "secret").write_text("token\n")
    os.symlink(tmp_path / "secret", script / "secret")
    os.symlink("train.py", script / "inside.py")  # a link that stays inside is packed
    with pytest.raises(ValidationError, match=r"^source_dir='secret -> .*secret': the link points outside"):
        _estimator(script).fit(wait=False)
    assert Store(home).list_jobs() == [] and not (home / "output").exists()
    estimator = _estimator(script, follow_symlinks=True, max_run=60)
    estimator.fit(wait=False, job_name="followed")
    estimator.latest_training_job.stop()
    tarball = home / "output" / "followed" / "source" / "sourcedir.tar.gz"
    with tarfile.open(tarball) as tar:
        assert sorted(tar.getnames()) == ["inside.py", "secret", "train.py"]
        assert tar.extractfile("secret").read() == b"token\n"


def test_hang_timeout_zero_warns_that_hangs_go_unnoticed(script):
    with pytest.warns(UserWarning, match="hang_timeout_seconds=0 turns hang detection off"):
        _estimator(script, hang_timeout_seconds=0)


def test_the_catalogue_lists_every_case():
    from pathlib import Path

    from tests.cli.test_bad_inputs import REFUSED as CLI_REFUSED

    catalogue = (Path(__file__).resolve().parents[2] / "docs" / "bad-inputs.md").read_text()
    missing = [case for case, *_ in REFUSED + CLI_REFUSED if f"`{case}`" not in catalogue]
    assert missing == [], "add these cases to docs/bad-inputs.md"
