"""`from shipyard.pytorch import PyTorch`, as `from sagemaker.pytorch import PyTorch`."""

from shipyard.sdk.frameworks import PyTorch

__all__ = ["PyTorch"]
