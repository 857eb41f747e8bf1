"""smdebug, SageMaker Debugger's library, served to a job's processes over shipyard's debugger
(docs/sagemaker-libraries-smdebug-environment.md): `import smdebug.pytorch as smd` gives the hook
(shipyard.runtime.debugger.hook, the one the job's debugger_hook_config installs) and
`from smdebug.trials import create_trial` reads what it saved (shipyard.rules.debugger.trials)."""

from shipyard.contract.debugger.modes import ModeKeys as modes  # noqa: N813 (smdebug's name: smd.modes.TRAIN)

from .save_config import ReductionConfig, SaveConfig, SaveConfigMode

__all__ = ["ReductionConfig", "SaveConfig", "SaveConfigMode", "modes"]
