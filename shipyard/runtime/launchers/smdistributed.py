"""`smdistributed` (dataparallel or modelparallel) is served the way SageMaker model parallel v2 runs:
torchrun on every instance, and the script's `shipyard.parallel` reads the strategy from `mp_parameters`
(SM_HP_MP_PARAMETERS) or the dataparallel flag. SageMaker starts SMDDP with mpirun over SSH; torchrun gives
the script the same process group with nothing to set up between instances.

Its priority is below torch_distributed's, so with both set torchrun wins (spec 2.3), which plans the same
command line anyway; the library still reads mp_parameters."""

from __future__ import annotations

from shipyard.runtime.launchers.torchrun import TorchDistributed


class SMDistributed(TorchDistributed):
    name = "smdistributed"
    priority = 20
    flag = "sagemaker_distributed_dataparallel_enabled"

    def enabled(self, env) -> bool:
        return super().enabled(env) or env.is_modelparallel_enabled
