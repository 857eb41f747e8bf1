"""`from shipyard.inputs import TrainingInput, FileSystemInput, ShuffleConfig`, as `sagemaker.inputs`."""

from shipyard.sdk.inputs import FileSystemInput, ShuffleConfig, TrainingInput

__all__ = ["FileSystemInput", "ShuffleConfig", "TrainingInput"]
