"""smdebug's PyTorch hook over shipyard's (shipyard.runtime.debugger.hook), with smdebug's singleton: one
hook per process. When the job has a debugger_hook_config, the injected sitecustomize has already
installed that hook on every model of the saving processes (rank 0, or every rank with
include_workers=all); `Hook.create_from_json_file()` and `get_hook()` hand back that same hook, and its
register_module / register_loss have nothing left to do, so nothing is saved twice. On a process that
does not save (another rank, as smdebug's non-chief workers) the hook is one that saves nothing.

Without a debugger_hook_config, `smd.Hook(out_dir, ...)` or create_from_json_file(path) makes a hook of
the modules the script registers; its TRAIN steps end at each optimizer step, as the job's hook's do."""

from __future__ import annotations

import json
import os
from pathlib import Path

from shipyard.contract.debugger import collections as coll
from shipyard.contract.debugger import modes
from shipyard.errors import ValidationError
from shipyard.runtime.debugger import hook as core_hook

from ..save_config import ReductionConfig, SaveConfig

DEFAULT_CONFIG = "/opt/ml/input/config/debughookconfig.json"  # smdebug's default, where SageMaker writes it
SCALAR_PREFIX = "scalar/"  # smdebug's: save_scalar("loss", ...) saves "scalar/loss"

_hook: Hook | None = None


class Hook:
    def __init__(self, out_dir=None, export_tensorboard=False, tensorboard_dir=None, dry_run=False,
                 reduction_config: ReductionConfig | None = None, save_config: SaveConfig | None = None,
                 include_regex=None, include_collections=None, save_all=False, include_workers="one") -> None:
        if os.environ.get(core_hook.CONFIG_ENV):
            raise ValidationError("smd.Hook(...)", out_dir, "this job's debugger_hook_config already installed "
                                  "the process's hook (one per process); use smd.Hook.create_from_json_file() or "
                                  "smd.get_hook(create_if_not_exists=True) to use it, or drop debugger_hook_config")
        if export_tensorboard or tensorboard_dir:
            raise ValidationError("smd.Hook(export_tensorboard/tensorboard_dir)", tensorboard_dir,
                                  "not written while training here; export the saved tensors afterwards with "
                                  "`shipyard debugger tensorboard <job or path> --out DIR`")
        if not out_dir:
            raise ValidationError("smd.Hook(out_dir)", out_dir, "give the directory to save the tensors in")
        if include_workers not in ("one", "all"):
            raise ValidationError("smd.Hook(include_workers)", include_workers, "use 'one' or 'all'")
        params = {"include_workers": include_workers, "save_all": str(bool(save_all)).lower(),
                  **(save_config.parameters() if save_config else {}),
                  **(reduction_config.parameters() if reduction_config else {})}
        if include_regex:
            params["include_regex"] = include_regex if isinstance(include_regex, str) else ",".join(include_regex)
        names = [getattr(c, "name", c) for c in ([include_collections] if isinstance(include_collections, str)
                                                  else include_collections or ())]
        unknown = [name for name in names if name not in coll.BUILTIN_REGEX]
        if unknown:
            raise ValidationError("smd.Hook(include_collections)", unknown, "not built-in collections (there is no "
                                  f"add_collection here); use {', '.join(coll.BUILTIN_REGEX)}, or include_regex")
        core = None
        if not dry_run and core_hook.saves_here(params):
            core = core_hook.Hook(str(out_dir), params, dict.fromkeys(names, {}))
            core.install_steps()
        self.core = core  # None on a process that saves nothing
        set_hook(self)

    @classmethod
    def _over(cls, core: core_hook.Hook | None) -> Hook:
        hook = cls.__new__(cls)
        hook.core = core
        return hook

    @classmethod
    def create_from_json_file(cls, json_file_path=None) -> Hook:
        """The hook of a JSON hook config (SageMaker's debughookconfig.json): by default the job's, which is
        the hook the job already has."""
        job_config = os.environ.get(core_hook.CONFIG_ENV)
        path = json_file_path or job_config or DEFAULT_CONFIG
        if job_config and Path(path).resolve() == Path(job_config).resolve():
            # The sitecustomize installed it (job_hook() only hands it back); None where this process saves nothing.
            core = core_hook.job_hook()
            if _hook is None or _hook.core is not core:
                set_hook(cls._over(core))
            return _hook
        if job_config:
            raise ValidationError("Hook.create_from_json_file", json_file_path, f"this job's hook (from {job_config}) "
                                  "is the process's hook; call it without a path")
        if not Path(path).is_file():
            raise ValidationError("Hook.create_from_json_file", path, "no hook config there: give the estimator "
                                  "debugger_hook_config=DebuggerHookConfig(...) (or rules) to have the job write "
                                  "one, or pass the path of your own")
        params = json.loads(Path(path).read_text()).get("HookParameters") or {}
        core = None
        if core_hook.saves_here(params):
            core = core_hook.Hook.create_from_json_file(path)
            core.install_steps()
        hook = cls._over(core)
        set_hook(hook)
        return hook

    # -- the hook API ------------------------------------------------------------------------------------
    def register_module(self, module) -> None:
        if self.core is not None and not self.core.global_forward:  # the job's hook sees every module already
            self.core.register_module(module)

    def register_loss(self, loss_module) -> None:
        if self.core is not None and not self.core.global_forward:
            self.core.register_loss(loss_module)

    def set_mode(self, mode) -> None:
        try:
            mode = modes.parse(mode)
        except ValueError as exc:
            raise ValidationError("hook.set_mode", mode, str(exc)) from None
        if self.core is not None:
            self.core.set_mode(mode)

    def save_scalar(self, name: str, value, sm_metric: bool = False, timestamp=None) -> None:
        """`scalar/<name>` at the current step, whatever the save config. sm_metric=True also prints it as
        `<name>_<MODE>: <value>` for the estimator's metric_definitions to scrape (there is no SageMaker
        Metrics service here)."""
        if self.core is None:
            return
        try:
            self.core.save_scalar(SCALAR_PREFIX + name, value)
        except ValueError as exc:
            raise ValidationError(f"hook.save_scalar({name!r})", value, f"{exc}: save a number") from None
        if sm_metric:
            number = float(value.item() if hasattr(value, "item") else value)
            print(f"{SCALAR_PREFIX}{name}_{self.core.mode.upper()}: {number}", flush=True)

    def record_tensor_value(self, tensor_name: str, tensor_value) -> None:
        """Saved at the steps where a collection whose regex matches the name is due."""
        if self.core is not None:
            self.core.record_tensor_value(tensor_name, tensor_value)

    def close(self) -> None:
        if self.core is not None:
            self.core.close()


def get_hook(json_config_path=None, create_if_not_exists: bool = False) -> Hook | None:
    """The process's hook: in a job with a debugger_hook_config, the job's; else the one the script made,
    or one made from json_config_path when asked to; None when there is none (smdebug is then off)."""
    if _hook is None and (os.environ.get(core_hook.CONFIG_ENV) or (create_if_not_exists and json_config_path)):
        Hook.create_from_json_file(json_config_path)
    return _hook


def set_hook(custom_hook: Hook) -> None:
    global _hook
    if not isinstance(custom_hook, Hook):
        raise ValidationError("set_hook", custom_hook, "give an smd.Hook")
    _hook = custom_hook


def del_hook() -> None:
    global _hook
    _hook = None
