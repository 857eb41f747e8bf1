"""`from shipyard.sklearn import SKLearn`, as `from sagemaker.sklearn import SKLearn`."""

from shipyard.sdk.frameworks import SKLearn

__all__ = ["SKLearn"]
