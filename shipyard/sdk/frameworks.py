"""The framework estimators of SageMaker's script mode, so migrating is a change of import."""

from __future__ import annotations

from typing import Any

from shipyard.sdk.estimator import Framework


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
