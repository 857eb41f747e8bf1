"""`import smdebug.pytorch as smd`: the hook (smd.Hook, smd.get_hook) over shipyard's debugger hook."""

from smdebug import ReductionConfig, SaveConfig, SaveConfigMode, modes
from smdebug.trials import create_trial

from .hook import Hook, del_hook, get_hook, set_hook

__all__ = ["Hook", "ReductionConfig", "SaveConfig", "SaveConfigMode", "create_trial", "del_hook", "get_hook",
           "modes", "set_hook"]
