"""The framework estimators of SageMaker's script mode, so migrating is a change of import."""

from __future__ import annotations

import re
from typing import Any

from shipyard.errors import ValidationError
from shipyard.sdk.estimator import Framework, check_installed


class PyTorch(Framework):
    framework = "pytorch"
    framework_package = ("torch",)
    default_base_job_name = "pytorch-training"


class TensorFlow(Framework):
    """Adds the `model_dir` hyperparameter as SageMaker's does: `<output_path>/<job>/model`, unique to the
    job (a plain path under a local output, which every instance can write: backends/sandbox.py), and
    `/opt/ml/model` with MPI; an explicit `model_dir` is passed as given; `model_dir=False` adds nothing."""

    framework = "tensorflow"
    framework_package = ("tensorflow", "tensorflow-cpu")
    default_base_job_name = "tensorflow-training"

    def __init__(self, entry_point: str | None = None, model_dir: Any = None, **kwargs: Any) -> None:
        self.model_dir = model_dir
        super().__init__(entry_point, **kwargs)

    def _framework_hyperparameters(self, job_name: str, output_path: str) -> dict[str, Any]:
        if self.model_dir is False:
            return {}
        if self.model_dir:
            return {"model_dir": self.model_dir}
        from shipyard.storage.uri import filesystem, is_local, join

        if "mpi" in self._enabled_distribution:
            return {"model_dir": "/opt/ml/model"}
        model_dir = join(output_path, job_name, "model")
        return {"model_dir": filesystem(model_dir)[1] if is_local(model_dir) else model_dir}


class SKLearn(Framework):
    framework = "sklearn"
    framework_package = ("scikit-learn",)
    default_base_job_name = "sagemaker-scikit-learn"


class XGBoost(Framework):
    framework = "xgboost"
    framework_package = ("xgboost",)
    default_base_job_name = "sagemaker-xgboost"


class HuggingFace(Framework):
    """SageMaker's Hugging Face estimator: a PyTorch script-mode job (torchrun for `torch_distributed` and
    `pytorchddp`, as for PyTorch) whose versions are named as in SageMaker's SDK, in its argument order
    (py_version first) and checked as it checks them: transformers_version and one of pytorch_version or
    tensorflow_version, to the same precision (the SDK's alternative, an image_uri, names no image shipyard
    has). transformers_version is the job's framework_version, as in the SDK; pytorch_version stays on the
    estimator, since the job spec has no field for it (SageMaker keeps it in the image's tag)."""

    framework = "huggingface"
    framework_package = ("transformers",)
    default_base_job_name = "huggingface-pytorch-training"

    def __init__(self, py_version: str | None = None, entry_point: str | None = None,
                 transformers_version: str | None = None, tensorflow_version: str | None = None,
                 pytorch_version: str | None = None, **kwargs: Any) -> None:
        if "framework_version" in kwargs:
            raise ValidationError("framework_version", kwargs["framework_version"], "HuggingFace takes "
                                  "transformers_version (and pytorch_version), as SageMaker's SDK")
        self.tensorflow_version, self.pytorch_version = tensorflow_version, pytorch_version
        _check_versions(py_version, transformers_version, tensorflow_version, pytorch_version)
        super().__init__(entry_point, framework_version=transformers_version, py_version=py_version, **kwargs)

    def _check_framework_version(self) -> None:
        check_installed("transformers_version", self.framework_version, self.framework_package)
        check_installed("pytorch_version", self.pytorch_version, ("torch",))

    @classmethod
    def _from_spec(cls, spec):
        estimator = super()._from_spec(spec)
        estimator.tensorflow_version = estimator.pytorch_version = None   # not recorded (see the class)
        return estimator


def _check_versions(py_version: Any, transformers: Any, tensorflow: Any, pytorch: Any) -> None:
    """The SDK's checks (HuggingFace._validate_args and the py_version it requires), and shipyard's one
    refusal: Hugging Face on TensorFlow (SageMaker's TensorFlow images stop at transformers 4.26, and
    transformers 5 has no TensorFlow models)."""
    for name, value in (("py_version", py_version), ("transformers_version", transformers),
                        ("pytorch_version", pytorch), ("tensorflow_version", tensorflow)):
        if value is not None and not isinstance(value, str):
            raise ValidationError(name, value, f"give the version as text, e.g. {name}={str(value)!r}")
    if transformers is None:
        raise ValidationError("transformers_version", None, "give the transformers version the script is written "
                              "for, e.g. transformers_version='4.49' (with pytorch_version='2.5')")
    if tensorflow is not None and pytorch is not None:
        raise ValidationError("tensorflow_version", tensorflow, "give only one of tensorflow_version and "
                              "pytorch_version, as SageMaker's SDK")
    if tensorflow is not None:
        raise ValidationError("tensorflow_version", tensorflow, "Hugging Face on TensorFlow is not supported by "
                              "shipyard; give pytorch_version, or run the script with shipyard.tensorflow.TensorFlow")
    if pytorch is None:
        raise ValidationError("pytorch_version", None, "give the PyTorch version the script is written for, "
                              "e.g. pytorch_version='2.5'")
    if len(transformers.split(".")) != len(pytorch.split(".")):
        raise ValidationError("pytorch_version", pytorch, f"write transformers_version ({transformers!r}) and "
                              "pytorch_version to the same precision, both full (4.49.0, 2.5.1) or both short "
                              "(4.49, 2.5), as SageMaker's SDK requires")
    if py_version is None or not re.fullmatch(r"py3\d*", py_version):
        raise ValidationError("py_version", py_version, "give the Python version as SageMaker names it, e.g. "
                              "py_version='py311'")
