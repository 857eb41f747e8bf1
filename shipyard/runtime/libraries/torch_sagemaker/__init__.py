"""`torch.sagemaker`, SageMaker model parallel v2 (SMP v2), served by shipyard.parallel
(shipyard/parallel/smp_v2.py): init(), is_initialized(), transform() and state. SMP's other modules
(delayed_param, distributed.checkpoint, moe, nn) are not served, so importing them fails naming them.
See docs/sagemaker-libraries-smddp-smp-v2.md."""

from shipyard.parallel.smp_v2 import init, is_initialized, state, transform

__all__ = ["init", "is_initialized", "state", "transform"]
