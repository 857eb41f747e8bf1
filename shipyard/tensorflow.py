"""`from shipyard.tensorflow import TensorFlow`, as `from sagemaker.tensorflow import TensorFlow`."""

from shipyard.sdk.frameworks import TensorFlow

__all__ = ["TensorFlow"]
