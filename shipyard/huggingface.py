"""`from shipyard.huggingface import HuggingFace`, as `from sagemaker.huggingface import HuggingFace`."""

from shipyard.sdk.frameworks import HuggingFace

__all__ = ["HuggingFace"]
