"""`image_uris.retrieve("xgboost", region, version)` builds SageMaker's URI, and the image catalog knows what it
runs; an unknown image is an error naming the mapping files, which a user extends."""

from __future__ import annotations

import pytest

from shipyard import Estimator, image_uris
from shipyard.errors import ValidationError
from shipyard.spec.images import resolve


@pytest.mark.parametrize(("region", "version", "uri"), [
    ("us-east-1", "1.7-1", "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"),
    ("us-west-2", "1.5-1", "246618743249.dkr.ecr.us-west-2.amazonaws.com/sagemaker-xgboost:1.5-1"),
    ("eu-west-1", "1.7-1", "141502667606.dkr.ecr.eu-west-1.amazonaws.com/sagemaker-xgboost:1.7-1"),
    ("ap-northeast-1", "1.3-1", "354813040037.dkr.ecr.ap-northeast-1.amazonaws.com/sagemaker-xgboost:1.3-1"),
    ("cn-north-1", "1.7-1", "450853457545.dkr.ecr.cn-north-1.amazonaws.com.cn/sagemaker-xgboost:1.7-1"),
])
def test_retrieve_builds_sagemakers_uri_and_the_catalog_knows_it(region, version, uri):
    assert image_uris.retrieve("xgboost", region, version) == uri
    assert image_uris.retrieve(framework="xgboost", region=region, version=version, image_scope="training",
                               instance_type="ml.m5.xlarge", py_version="py3") == uri
    image = resolve(uri)
    assert (image.kind, image.algorithm) == ("algorithm", "xgboost")


@pytest.mark.parametrize(("arguments", "field", "says"), [
    ({"framework": "xgbost", "region": "us-east-1", "version": "1.7-1"}, "framework", "did you mean 'xgboost'?"),
    ({"framework": "xgboost", "region": "us-east-1", "version": "1.7-2"}, "version", "did you mean '1.7-1'?"),
    ({"framework": "xgboost", "region": "us-east-1"}, "version", "one of 0.90-1"),
    ({"framework": "xgboost", "version": "1.7-1"}, "region", "region='us-west-2'"),
    ({"framework": "xgboost", "region": "us-east-7", "version": "1.7-1"}, "region", "did you mean 'us-east-"),
    ({"framework": "xgboost", "region": "us-east-1", "version": "1.7-1", "image_scope": "inference"}, "image_scope",
     "training jobs only"),
    ({"framework": "xgboost", "region": "us-east-1", "version": "1.7-1", "model_id": "x"}, "model_id", "remove it"),
])
def test_retrieve_errors_name_the_argument(arguments, field, says):
    with pytest.raises(ValidationError, match=says) as error:
        image_uris.retrieve(**arguments)
    assert error.value.field == field


def test_an_unknown_image_names_the_files_users_extend(home):
    with pytest.raises(ValidationError) as error:
        Estimator(image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/my-algo:2", role="r",
                  instance_count=1, instance_type="local")
    assert error.value.field == "image_uri"
    assert "images.yaml" in str(error.value) and str(home / "images.yaml") in str(error.value)
    with pytest.raises(ValidationError, match="not an image URI"):
        resolve("not an image")


def test_a_users_catalog_adds_an_image_a_mirror_of_the_algorithm(home):
    home.mkdir(parents=True, exist_ok=True)
    (home / "images.yaml").write_text("my-xgboost:\n  kind: algorithm\n  algorithm: xgboost\n"
                                      "  repository: ml/xgboost-mirror\n  versions: ['1.7-1']\n")
    estimator = Estimator(image_uri="registry.example.com:5000/ml/xgboost-mirror:1.7-1", role="r",
                          instance_count=1, instance_type="local", hyperparameters={"num_round": 3})
    [instance] = estimator.plan({"train": "file:///tmp"})
    assert instance.launcher == "algorithm" and instance.argv[-3:] == ["-m", "shipyard.algorithms", "xgboost"]
    (home / "images.yaml").write_text("mine:\n  kind: algorithm\n  algorithm: xgbooost\n  repository: r\n"
                                      "  versions: ['1']\n")
    with pytest.raises(ValidationError, match="did you mean 'xgboost'"):
        resolve("r:1")


def test_an_image_with_an_entry_point_runs_the_script(home, tmp_path):
    """As SageMaker's XGBoost container in script mode: the entry point runs, not the algorithm."""
    (tmp_path / "train.py").write_text("print('mine')\n")
    estimator = Estimator(entry_point=str(tmp_path / "train.py"), role="r", instance_count=1, instance_type="local",
                          image_uri=image_uris.retrieve("xgboost", "us-east-1", "1.7-1"), hyperparameters={"depth": 1})
    [instance] = estimator.plan()
    assert instance.launcher == "single" and instance.argv[1:] == ["train.py", "--depth", "1"]
