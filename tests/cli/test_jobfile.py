"""job.yaml and `run` options -> the estimator's arguments."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from shipyard.cli import jobfile
from shipyard.cli.jobfile import RunOptions, build_request, load, parse_channel, parse_value
from shipyard.errors import ValidationError
from shipyard.sdk.arguments import HONOURED

DOCS = Path(__file__).resolve().parents[2] / "docs" / "job-yaml.md"


@pytest.mark.parametrize("text, expected", [
    ("3", 3), ("0.01", 0.01), ("true", True), ("false", False), ("null", None), ("[1,2]", [1, 2]),
    ('{"a": 1}', {"a": 1}), ('"quoted"', "quoted"), ("adam", "adam"), ("a b;$(rm -rf /)", "a b;$(rm -rf /)"),
    ("", ""), ("1e-3", 0.001), ("NaN", "NaN"), ("Infinity", "Infinity"), ("01", "01"),
])
def test_hp_values_are_json_when_they_parse(text, expected):
    assert parse_value(text) == expected and type(parse_value(text)) is type(expected)


def test_channel_with_distribution_suffix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parse_channel("train=s3://b/data/train") == ("train", {"s3_data": "s3://b/data/train"})
    assert parse_channel("test=file:///data/test:ShardedByS3Key") == (
        "test", {"s3_data": "file:///data/test", "distribution": "ShardedByS3Key"})
    # a relative local path is made absolute: the instances do not run in this directory
    assert parse_channel("x=data/x") == ("x", {"s3_data": str(tmp_path / "data" / "x")})
    with pytest.raises(ValidationError, match="KEY=VALUE"):
        parse_channel("s3://no-name")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proj" / "job.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_yaml_paths_are_relative_to_the_file(tmp_path):
    path = _write(tmp_path, """
framework: none
job_name: j-1
entry_point: train.py
source_dir: src
dependencies: [lib]
instance_count: 2
inputs:
  train: data/train
  test: {s3_data: s3://b/test, distribution: ShardedByS3Key}
output_path: out
environment: {FOO: 1, BAR: true}
framework_version: 2.1
""")
    request = load(path)
    base = tmp_path / "proj"
    assert request.framework == "none" and request.job_name == "j-1"
    args = request.arguments
    assert args["source_dir"] == str(base / "src") and args["entry_point"] == "train.py"
    assert args["dependencies"] == [str(base / "lib")] and args["output_path"] == str(base / "out")
    assert args["environment"] == {"FOO": "1", "BAR": "true"} and args["framework_version"] == "2.1"
    assert request.inputs == {"train": {"s3_data": str(base / "data/train")},
                              "test": {"s3_data": "s3://b/test", "distribution": "ShardedByS3Key"}}


def test_entry_point_without_source_dir_is_relative_to_the_file(tmp_path):
    assert load(_write(tmp_path, "entry_point: train.py\n")).arguments["entry_point"] == str(
        tmp_path / "proj" / "train.py")


@pytest.mark.parametrize("text, message", [
    ("instance_cout: 2\n", "key='instance_cout': unknown name; did you mean 'instance_count'?"),
    ("hyperparameter: {a: 1}\n", "did you mean 'hyperparameters'?"),
    ("inputs: {train: {s3_data: s3://b/t, distribuion: ShardedByS3Key}}\n",
     "key in inputs.train='distribuion': unknown name; did you mean 'distribution'?"),
    ("instance_count: two\n", "instance_count='two': Input should be a valid integer"),
    ("inputs: {train: {s3_data: s3://b/t, distribution: Sharded}}\n", "inputs.train.distribution='Sharded'"),
    ("framework: pytorc\n", "framework='pytorc'"),
    ("- a\n- b\n", "must be a mapping"),
    ("a: [\n", "cannot be read as YAML"),
])
def test_yaml_errors_name_the_key(tmp_path, text, message):
    with pytest.raises(ValidationError, match=re.escape(message)):
        load(_write(tmp_path, text))


def test_sagemaker_only_arguments_pass_through_to_the_estimator(tmp_path):
    request = load(_write(tmp_path, "entry_point: t.py\nrole: arn:aws:iam::1:role/x\nrules: []\n"))
    assert request.arguments["role"] == "arn:aws:iam::1:role/x" and request.arguments["rules"] == []


def test_schema_covers_every_estimator_argument():
    assert HONOURED <= set(jobfile.JobFile.model_fields)


def test_documented_example_is_valid(tmp_path):
    example = re.search(r"```yaml\n(.*?)```", DOCS.read_text(), re.S).group(1)
    request = load(_write(tmp_path, example))
    assert request.arguments["instance_count"] == 2
    assert set(yaml.safe_load(example)) - {"inputs", "framework", "job_name"} <= set(request.arguments)


def test_options_override_and_merge_with_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, """
entry_point: train.py
source_dir: src
instance_count: 2
hyperparameters: {epochs: 3, lr: 0.1}
environment: {A: "1"}
metric_definitions: [{Name: loss, Regex: 'loss=(\\S+)'}, {Name: acc, Regex: 'acc=(\\S+)'}]
inputs: {train: s3://b/train}
distribution: {torch_distributed: {enabled: true}}
""")
    options = RunOptions(instance_count=4, hyperparameters=("lr=0.5", "opt=adam"), environment=("B=2",),
                         metrics=("loss=l=([0-9.]+)",), channels=("test=s3://b/test",), sharded=("train",),
                         processes_per_host=2, source_dir="other", framework="sklearn")
    request = build_request(str(path), options)
    args = request.arguments
    assert request.framework == "sklearn" and args["instance_count"] == 4
    assert args["source_dir"] == str(tmp_path / "other")
    assert args["hyperparameters"] == {"epochs": 3, "lr": 0.5, "opt": "adam"}
    assert args["environment"] == {"A": "1", "B": "2"}
    assert args["metric_definitions"] == [{"Name": "acc", "Regex": "acc=(\\S+)"},
                                          {"Name": "loss", "Regex": "l=([0-9.]+)"}]
    assert args["distribution"] == {"torch_distributed": {"enabled": True, "processes_per_host": 2}}
    assert request.inputs == {"train": {"s3_data": "s3://b/train", "distribution": "ShardedByS3Key"},
                              "test": {"s3_data": "s3://b/test"}}


def test_option_errors():
    with pytest.raises(ValidationError, match="needs a distribution strategy"):
        build_request("train.py", RunOptions(processes_per_host=2))
    with pytest.raises(ValidationError, match="did you mean 'train'"):
        build_request("train.py", RunOptions(channels=("train=s3://b/t",), sharded=("trian",)))
    with pytest.raises(ValidationError, match="use KEY=VALUE"):
        build_request("train.py", RunOptions(hyperparameters=("epochs",)))


def test_model_dir_is_for_tensorflow_only(tmp_path):
    path = _write(tmp_path, "entry_point: train.py\nmodel_dir: false\n")
    assert build_request(str(path), RunOptions(framework="tensorflow")).arguments["model_dir"] is False
    with pytest.raises(ValidationError, match="only the tensorflow framework takes model_dir"):
        build_request(str(path), RunOptions())


def test_entry_point_given_with_its_source_dir_path(tmp_path, monkeypatch):
    """`shipyard run src/train.py --source-dir src`, as a shell completes it, means train.py in src."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "train.py").write_text("")
    request = build_request("src/pkg/train.py", RunOptions(source_dir="src"))
    assert request.arguments["entry_point"] == "pkg/train.py"
    assert build_request("pkg/train.py", RunOptions(source_dir="src")).arguments["entry_point"] == "pkg/train.py"


def test_a_framework_registered_by_another_package_is_accepted(tmp_path, monkeypatch):
    """The job file's `framework` is any name in the frameworks registry, entry points included."""
    from importlib.metadata import EntryPoint, EntryPoints

    added = [EntryPoint("mine", "shipyard.sdk.frameworks:PyTorch", "shipyard.frameworks")]
    monkeypatch.setattr("shipyard.registry._installed_entry_points", lambda: EntryPoints(added))
    monkeypatch.delattr(jobfile.FRAMEWORKS, "_entries", raising=False)  # read the entry points again
    assert load(_write(tmp_path, "framework: mine\n")).framework == "mine"
