"""Framework images as SageMaker's SDK resolves them (`sagemaker.image_uris.retrieve`, values copied from
sagemaker 2.257 for these arguments): the catalog knows each, in any region, and reads its versions off the tag."""

import pytest

from shipyard.errors import ValidationError
from shipyard.spec.images import resolve, runs


@pytest.fixture(autouse=True)
def empty_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SHIPYARD_HOME", str(tmp_path / "home"))


@pytest.mark.parametrize("uri, framework, version, py_version", [
    ("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.1-cpu-py310", "pytorch", "2.1", "py310"),
    ("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3-gpu-py311", "pytorch", "2.3", "py311"),
    ("763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.3.0-gpu-py311-cu121-ubuntu20.04-sagemaker",
     "pytorch", "2.3.0", "py311"),
    ("763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-training:2.13-cpu-py310", "tensorflow", "2.13", "py310"),
    ("683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3", "sklearn", "1.2-1", "py3"),
    ("683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1", "xgboost", "1.7-1", None),
    ("763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-training:"
     "2.0-transformers4.28-gpu-py310-cu118-ubuntu20.04", "huggingface", "4.28", "py310"),
])
def test_the_sdks_framework_images_are_known_with_their_versions(uri, framework, version, py_version):
    image, tag = runs(uri)
    assert (image.framework, tag["framework_version"], tag["py_version"]) == (framework, version, py_version)
    assert image.kind == ("algorithm" if framework == "xgboost" else "framework")


@pytest.mark.parametrize("uri", [
    "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-inference:2.1-cpu-py310",    # not a training image
    "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:latest",
    "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-training:2.0-gpu-py310",   # no transformers
])
def test_other_images_are_an_error_naming_the_files_to_extend(uri):
    with pytest.raises(ValidationError, match=r"not an image shipyard knows .*images.yaml"):
        resolve(uri)


def test_a_users_file_adds_a_framework_image(tmp_path):
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "images.yaml").write_text("mine:\n  kind: framework\n  framework: pytorch\n"
                                                   "  repository: team/torch-train\n  versions: ['2.5']\n")
    image, tag = runs("registry.example.com:5000/team/torch-train:2.5-cpu-py311")
    assert (image.name, image.framework, tag["framework_version"]) == ("mine", "pytorch", "2.5")
    with pytest.raises(ValidationError, match="not an image shipyard knows"):
        resolve("registry.example.com:5000/team/torch-train:2.6-cpu-py311")   # not among its versions
