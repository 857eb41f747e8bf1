"""Job files of the built-in algorithm's image and of the HuggingFace estimator: the estimator each runs with.
A built-in algorithm's image_uri with no entry point runs the algorithm without `framework: none` (the
framework the image implies), and `framework: huggingface` takes SageMaker's HuggingFace versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipyard.cli.jobfile import RunOptions, build_request, load, make_estimator
from shipyard.cli.main import cli
from shipyard.errors import ValidationError
from shipyard.sdk.estimator import Estimator
from shipyard.sdk.frameworks import HuggingFace

XGBOOST = """
image_uri: 246618743249.dkr.ecr.us-west-2.amazonaws.com/sagemaker-xgboost:1.7-1
instance_count: 2
hyperparameters: {num_round: 10, objective: "binary:logistic", max_depth: 3}
inputs:
  train: {s3_data: data/train, content_type: text/csv, distribution: ShardedByS3Key}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proj" / "job.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_an_algorithm_image_runs_the_algorithm_with_no_framework_given(runner, home, tmp_path):
    path = _write(tmp_path, XGBOOST)
    (path.parent / "data" / "train").mkdir(parents=True)
    (path.parent / "data" / "train" / "part-0.csv").write_text("1,0.5\n")
    request = build_request(str(path), RunOptions())
    assert request.framework == "none"
    assert type(make_estimator(request)) is Estimator
    assert type(make_estimator(load(path))) is Estimator   # the server's and `plan`'s way: no options applied
    result = runner.invoke(cli, ["run", str(path), "--job-name", "xgb-dry", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    instances = json.loads(result.stdout)["instances"]
    assert [(i["host"], i["launcher"]) for i in instances] == [("algo-1", "algorithm"), ("algo-2", "algorithm")]
    for item in instances:
        assert item["entry_point_command"][-3:] == ["-m", "shipyard.algorithms", "xgboost"]
        # the user's hyperparameters only: no code to point at (sagemaker_program and the others)
        assert json.loads(item["environment"]["SM_HPS"]) == {"num_round": 10, "objective": "binary:logistic",
                                                              "max_depth": 3}


def test_an_algorithm_image_under_a_framework_estimator_names_the_framework(tmp_path):
    path = _write(tmp_path, "framework: pytorch\n" + XGBOOST)
    with pytest.raises(ValidationError, match=r"^framework='pytorch': image_uri .*sagemaker-xgboost:1.7-1 is a "
                                              r"built-in algorithm's, run with no entry_point by framework: none"):
        build_request(str(path), RunOptions())
    with pytest.raises(ValidationError, match=r"^framework='xgboost'"):
        build_request(_write(tmp_path, XGBOOST).as_posix(), RunOptions(framework="xgboost"))
    assert build_request(str(path), RunOptions(framework="none")).framework == "none"


def test_an_image_with_an_entry_point_runs_the_script_with_the_images_framework(tmp_path):
    """SageMaker's algorithm images in script mode: the script runs under the image's framework (XGBoost's
    script mode); a framework image (as SageMaker's SDK resolves it, any region) names its framework."""
    request = build_request(str(_write(tmp_path, XGBOOST + "entry_point: train.py\n")), RunOptions())
    assert request.framework == "xgboost"
    for uri, framework in (("763104351884.dkr.ecr.eu-west-1.amazonaws.com/tensorflow-training:2.13-cpu-py310",
                            "tensorflow"),
                           ("683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3",
                            "sklearn")):
        path = _write(tmp_path, f"image_uri: {uri}\nentry_point: train.py\n")
        assert build_request(str(path), RunOptions()).framework == framework


def test_an_unknown_image_is_an_error_naming_the_catalog(tmp_path):
    path = _write(tmp_path, "image_uri: example.com/mine:1\n")
    with pytest.raises(ValidationError, match=r"^image_uri='example.com/mine:1': not an image shipyard knows"):
        build_request(str(path), RunOptions())


HUGGINGFACE = """
framework: huggingface
entry_point: train.py
source_dir: src
transformers_version: 5.24
pytorch_version: "2.13"
py_version: py311
instance_count: 2
distribution: {torch_distributed: {enabled: true}}
"""


def test_huggingface_job_file_builds_sagemakers_huggingface_estimator(home, tmp_path):
    path = _write(tmp_path, HUGGINGFACE)
    (path.parent / "src").mkdir()
    (path.parent / "src" / "train.py").write_text("print('hi')\n")
    request = build_request(str(path), RunOptions())
    assert request.framework == "huggingface"
    estimator = make_estimator(request)
    assert type(estimator) is HuggingFace
    # YAML's number 5.24 is the version text "5.24", as for framework_version
    assert (estimator.framework_version, estimator.pytorch_version, estimator.py_version) == ("5.24", "2.13", "py311")
    launches = estimator.plan(job_name="hf-dry")
    assert [launch.launcher for launch in launches] == ["torch_distributed"] * 2
    assert estimator._spec(None, "hf-file", estimator._store()).framework == "huggingface"


def test_huggingface_versions_need_the_huggingface_framework(tmp_path):
    path = _write(tmp_path, HUGGINGFACE.replace("framework: huggingface\n", ""))
    with pytest.raises(ValidationError, match=r"^transformers_version='5.24': only the huggingface framework "
                                              r"takes transformers_version; give framework: huggingface"):
        build_request(str(path), RunOptions())
    assert build_request(str(path), RunOptions(framework="huggingface")).framework == "huggingface"
    with pytest.raises(ValidationError, match=r"^model_dir=False: only the tensorflow framework takes model_dir"):
        build_request(str(_write(tmp_path, HUGGINGFACE + "model_dir: false\n")), RunOptions())
