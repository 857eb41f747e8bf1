"""shipyard: SageMaker-style distributed training jobs on machines you own.

    from shipyard.pytorch import PyTorch
    from shipyard import Estimator, TrainingInput

Names are imported lazily so that `import shipyard` (and the CLI) stays fast.
"""

from __future__ import annotations

__version__ = "0.1.0"

from shipyard.lazy import exports

__all__ = ["Estimator", "FileSystemInput", "InstanceGroup", "ShuffleConfig", "TrainingInput", "TrainingJob", "plan"]
__getattr__ = exports(__name__, {
    "Estimator": "shipyard.sdk.estimator:Estimator", "TrainingInput": "shipyard.sdk.inputs:TrainingInput",
    "FileSystemInput": "shipyard.sdk.inputs:FileSystemInput", "ShuffleConfig": "shipyard.sdk.inputs:ShuffleConfig",
    "TrainingJob": "shipyard.sdk.job:TrainingJob", "InstanceGroup": "shipyard.instance_group:InstanceGroup",
    "plan": "shipyard.sdk.plan:plan",
})
