"""The bad inputs of the hardening review (issue 14) through `shipyard run`: each is `error: ...` naming
the field (or the option), the value and the fix, exit 2, no traceback, no job. The same inputs through
the SDK: tests/sdk/test_bad_inputs.py; the catalogue: docs/bad-inputs.md."""

from __future__ import annotations

import os
import re

import pytest

from shipyard.cli.main import cli
from shipyard.store import Store

# (id, a job.yaml's extra lines or None, run's options, the error, as a regex)
REFUSED = [
    ("hyperparameter-dashes", None, ["--hp", "--x=1"], r"job.hyperparameters='--x': a name must not start with '-'"),
    ("hyperparameter-space", None, ["--hp", "my key=1"], r"'my key': a name must not .* contain whitespace"),
    ("hyperparameter-reserved", None, ["--hp", "sagemaker_program=x.py"], r"hyperparameters='sagemaker_program': sagemaker_\*"),
    ("hyperparameter-nan-in-file", "hyperparameters:\n  lr: .nan\n", [], r"hyperparameters\['lr'\]=nan: must be a finite number"),
    ("hyperparameters-not-a-mapping", "hyperparameters: [1, 2]\n", [], r"job.yaml: hyperparameters"),
    ("environment-contract", None, ["--env", "SM_MODEL_DIR=/x"], r"'SM_MODEL_DIR': SM_\* variables are the training contract's"),
    ("log-level", "container_log_level: LOUD\n", [], r"container_log_level='LOUD': give a logging level"),
    ("two-strategies", "distribution:\n  torch_distributed: {enabled: true}\n  mpi: {enabled: true}\n", [],
     r"distribution=\['mpi', 'torch_distributed'\]: a job runs one strategy"),
    ("metric-twice", "metric_definitions:\n  - {Name: loss, Regex: 'a=(.+)'}\n  - {Name: loss, Regex: 'b=(.+)'}\n", [],
     r"metric_definitions=\['loss'\]: metric names must be unique"),
    ("checkpoint-local-relative", "checkpoint_local_path: ckpts\n", [], r"checkpoint_local_path='ckpts': must be an absolute path"),
    ("channel-twice", "inputs:\n  train: /tmp\n  train: /etc\n", [], r"job.yaml: key='train': given twice \(line 4\)"),
    ("channel-mode-misspelt", None, ["--channel", "train=/tmp:Sharded"],
     r"--channel train: distribution='Sharded': unknown name; did you mean 'ShardedByS3Key'\?"),
    ("output-one-slash", None, ["--output-path", "s3:/bucket/x"], r"output_path='s3:/bucket/x': .*did you mean s3://bucket/x\?"),
    ("output-ftp", None, ["--output-path", "ftp://x/y"], r"output_path='ftp://x/y': the scheme ftp:// is not supported"),
    ("checkpoint-ftp", None, ["--checkpoint-s3-uri", "ftp://x/y"], r"checkpoint_s3_uri='ftp://x/y': the scheme ftp://"),
    ("spot-without-checkpoints", None, ["--use-spot-instances", "--max-wait", "100", "--max-run", "10"],
     r"set checkpoint_s3_uri, or --spot-without-checkpoints to accept that"),
    ("local-capacity", None, ["--instance-count", "1000"], r"1000 x local: this machine runs at most \d+ instances"),
    ("keep-alive-too-long", None, ["--keep-alive", "99999"], r"keep_alive_period_in_seconds=99999: must be 0-21600"),
    ("keep-alive-in-file", "keep_alive_period_in_seconds: -3\n", [], r"keep_alive_period_in_seconds=-3: must be 0-21600"),
    ("input-mode-misspelt", None, ["--input-mode", "Fastfile"], r"input_mode='Fastfile': unknown name; did you mean 'FastFile'\?"),
    ("gzip-outside-pipe", "inputs:\n  train: {s3_data: /tmp, compression: Gzip}\n", [],
     r"inputs\['train'\].compression='Gzip': works only in Pipe mode"),
    ("file-system-and-s3-data", "inputs:\n  fs: {s3_data: /tmp, directory_path: /tmp}\n", [],
     r"job.yaml: inputs.fs=.*: give the channel's s3_data .* or a file system's"),
    ("file-system-missing", "inputs:\n  fs: {file_system_id: f, file_system_type: EFS, directory_path: /nonexistent}\n", [],
     r"inputs\['fs'\].directory_path='/nonexistent': no such directory"),
    # heterogeneous clusters (issue 18)
    ("groups-and-instance-type", "instance_groups:\n  - {instance_group_name: a, instance_type: local, instance_count: 1}\n",
     ["--instance-type", "local"], r"instance_type='local': cannot be combined with instance_groups"),
    ("budget-without-price", None, ["--max-cost", "10"], r"max_cost=10.0: local has no on_demand_usd_per_hour in the "
     r"catalog, so a budget would never stop the job"),
    ("budget-negative", "max_cost: -1\n", [], r"max_cost=-1.0: must be a positive number of USD"),
    ("group-malformed", None, ["--instance-group", "train=local"], r"--instance-group='train=local': use NAME=INSTANCE_TYPE:COUNT"),
    ("group-names-repeated", None, ["--instance-group", "a=local:1", "--instance-group", "a=local:1"],
     r"instance_groups=\['a'\]: group names must be unique"),
    ("group-name-empty", "instance_groups:\n  - {instance_group_name: '', instance_type: local, instance_count: 1}\n", [],
     r"instance_group_name='': must be 1-64 characters"),
    ("group-name-too-long", None, ["--instance-group", "g" * 65 + "=local:1"], r"instance_group_name='g{65}': must be 1-64"),
    ("six-groups", None, [a for i in range(6) for a in ("--instance-group", f"g{i}=local:1")], r"6 groups; at most 5"),
    ("group-type-misspelt", None, ["--instance-group", "a=lokal:1"], r"instance_type='lokal': unknown name; did you mean 'local'\?"),
    ("group-capacity", None, ["--instance-group", "a=local:1", "--instance-group", "b=local:1000"],
     r"1 x local \+ 1000 x local: this machine runs at most"),
    ("channel-unknown-group", "inputs:\n  train: {s3_data: /tmp, instance_groups: [nope]}\n", ["--instance-group", "a=local:1"],
     r"channel train: instance_groups='nope': is not an instance group of this job; the job's groups are a"),
    ("channel-group-without-groups", "inputs:\n  train: {s3_data: /tmp, instance_groups: [a]}\n", [],
     r"instance_groups='a': is not an instance group of this job; the job has no instance_groups"),
    ("distribution-unknown-group", None, ["--instance-group", "a=local:1", "--distribution", "torch_distributed",
                                          "--distribution-group", "nope"], r"distribution.instance_groups='nope': is not an instance group"),
    ("distribution-two-groups", "distribution:\n  torch_distributed: {enabled: true}\n  instance_groups: [a, b]\n",
     ["--instance-group", "a=local:1", "--instance-group", "b=local:1"], r"runs on exactly one instance group"),
    ("distribution-group-no-strategy", "distribution:\n  instance_groups: [a]\n", ["--instance-group", "a=local:1"],
     r"names a group but no strategy is enabled"),
    ("distribution-group-unnamed", None, ["--instance-group", "a=local:1", "--instance-group", "b=local:1",
                                          "--distribution", "torch_distributed"], r"a heterogeneous job names the group that runs"),
    ("distribution-group-alone", None, ["--instance-group", "a=local:1", "--distribution-group", "a"],
     r"--distribution-group='a': needs a distribution .*strategy, e.g. --distribution torch_distributed"),
    ("groups-and-warm-pool", None, ["--instance-group", "a=local:1", "--keep-alive", "60"],
     r"warm pools cannot be combined with instance_groups"),
    ("controller-on-cluster-locally", None, ["--controller", "cluster"],
     r"job.controller='cluster': runs on a Ray cluster's head, so it needs backend='ray' \(not 'local'\)"),
]


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    return tmp_path


@pytest.mark.parametrize("file, options, message", [pytest.param(f, o, m, id=i) for i, f, o, m in REFUSED])
def test_refused_with_the_field_and_the_fix(runner, home, project, file, options, message):
    target = "train.py"
    if file is not None:
        (project / "job.yaml").write_text("framework_version: '2.13'\nentry_point: train.py\n" + file)
        target = "job.yaml"
    result = runner.invoke(cli, ["run", target, *options])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and re.search(message, result.stderr), result.stderr
    assert "Traceback" not in result.output
    assert not (home / "shipyard.db").exists() or Store(home).list_jobs() == []


def test_the_flags_the_fixes_name_exist(runner, home, project, tmp_path):
    """What the errors tell a CLI user to pass is accepted: --spot-without-checkpoints, --follow-symlinks."""
    spot = runner.invoke(cli, ["run", "train.py", "--use-spot-instances", "--max-wait", "100", "--max-run", "10",
                               "--spot-without-checkpoints", "--dry-run"])
    assert spot.exit_code == 0, spot.output
    (tmp_path / "secret").write_text("token\n")
    (project / "src").mkdir()
    (project / "src" / "train.py").write_text("print('hi')\n")
    os.symlink(tmp_path / "secret", project / "src" / "secret")
    refused = runner.invoke(cli, ["run", "train.py", "--source-dir", "src", "--detach"])
    assert refused.exit_code == 2 and "error: source_dir='secret -> " in refused.stderr, refused.output
    followed = runner.invoke(cli, ["run", "train.py", "--source-dir", "src", "--follow-symlinks", "--detach",
                                   "--job-name", "followed"])
    assert followed.exit_code == 0, followed.output
    Store(home).request_stop("followed")


def test_hang_timeout_zero_is_a_warning(runner, home, project):
    (project / "job.yaml").write_text("entry_point: train.py\nhang_timeout_seconds: 0\n")
    result = runner.invoke(cli, ["run", "job.yaml", "--dry-run"])
    assert result.exit_code == 0 and "warning: hang_timeout_seconds=0 turns hang detection off" in result.stderr


@pytest.mark.parametrize("setting, message", [
    ({}, r"cannot write there: no AWS credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
    ({"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "SHIPYARD_S3_ENDPOINT_URL": "http://127.0.0.1:9"},
     r"cannot write there: cannot reach the S3 endpoint http://127.0.0.1:9; start it or point SHIPYARD_S3_ENDPOINT_URL"),
], ids=["no-credentials", "endpoint-unreachable"])
@pytest.mark.parametrize("mode", [["--dry-run"], ["--detach"]], ids=["dry-run", "run"])
def test_s3_not_set_up_is_one_line_before_anything_is_uploaded(runner, home, project, monkeypatch, tmp_path,
                                                                setting, message, mode):
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                     "SHIPYARD_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore would retry the connection for seconds
    for variable, value in setting.items():
        monkeypatch.setenv(variable, value)
    result = runner.invoke(cli, ["run", "train.py", "--output-path", "s3://bucket/out", *mode])
    assert result.exit_code == 2, result.output
    assert re.fullmatch(r"error: output_path='s3://bucket/out': " + message + r".*\(docs/storage.md\)\n",
                        result.stderr), result.stderr
    assert not (home / "shipyard.db").exists() or Store(home).list_jobs() == []
