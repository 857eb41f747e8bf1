"""The framework estimators of SageMaker's script mode, so migrating is a change of import."""

from __future__ import annotations

from typing import Any

from shipyard.sdk.estimator import Framework


class PyTorch(Framework):
    framework = "pytorch"
    framework_package = ("torch",)
    default_base_job_name = "pytorch-training"


class TensorFlow(Framework):
    """Adds the `model_dir` hyperparameter as SageMaker's does: `<output_path>/<job>/model` when the
    output is remote object storage, `/opt/ml/model` otherwise (and with MPI); `model_dir=False` adds
    nothing."""

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
        from shipyard.storage.uri import is_local, join

        if "mpi" in self._enabled_distribution or is_local(output_path):
            return {"model_dir": "/opt/ml/model"}
        return {"model_dir": join(output_path, job_name, "model")}


class SKLearn(Framework):
    framework = "sklearn"
    framework_package = ("scikit-learn",)
    default_base_job_name = "sagemaker-scikit-learn"


class XGBoost(Framework):
    framework = "xgboost"
    framework_package = ("xgboost",)
    default_base_job_name = "sagemaker-xgboost"
