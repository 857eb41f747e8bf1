"""shipyard: SageMaker-style distributed training jobs on machines you own.

    from shipyard.pytorch import PyTorch
    from shipyard import Estimator, TrainingInput

Names are imported lazily so that `import shipyard` (and the CLI) stays fast.
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "Estimator": "shipyard.sdk.estimator",
    "TrainingInput": "shipyard.sdk.inputs",
    "TrainingJob": "shipyard.sdk.job",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'shipyard' has no attribute {name!r}")


__all__ = sorted(_LAZY)
