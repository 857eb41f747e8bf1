"""smdebug's SaveConfig, SaveConfigMode and ReductionConfig, as what they are here: the hook parameters
of shipyard's debugger (the keys of DebuggerHookConfig.hook_parameters, parsed by
shipyard.contract.debugger), so an smd.Hook built in code saves exactly as a configured one would."""

from __future__ import annotations

from shipyard.contract.debugger import collections as coll
from shipyard.contract.debugger import modes
from shipyard.contract.debugger.save_config import KEYS
from shipyard.contract.debugger.save_config import SaveConfig as _Parsed
from shipyard.errors import ValidationError


class SaveConfigMode:
    def __init__(self, save_interval=None, start_step=None, end_step=None, save_steps=None) -> None:
        self.save_interval, self.start_step, self.end_step = save_interval, start_step, end_step
        self.save_steps = save_steps

    def parameters(self, prefix: str = "") -> dict[str, str]:
        found = {}
        for key in KEYS:
            value = getattr(self, key)
            if value is not None:
                found[prefix + key] = ",".join(map(str, value)) if key == "save_steps" else str(value)
        return found


class SaveConfig(SaveConfigMode):
    """`mode_save_configs`: {mode: SaveConfigMode or its keyword dict}, each mode's own settings over the
    others (smdebug's)."""

    def __init__(self, mode_save_configs=None, save_interval=None, start_step=None, end_step=None,
                 save_steps=None) -> None:
        super().__init__(save_interval, start_step, end_step, save_steps)
        self.mode_save_configs = {}
        for mode, config in (mode_save_configs or {}).items():
            try:
                name = modes.parse(mode)
            except ValueError as exc:
                raise ValidationError("SaveConfig(mode_save_configs=...)", mode, str(exc)) from None
            self.mode_save_configs[name] = config if isinstance(config, SaveConfigMode) else SaveConfigMode(**config)
        try:
            _Parsed.from_parameters(self.parameters())
        except ValueError as exc:
            raise ValidationError("SaveConfig", self.parameters(), str(exc)) from None

    def parameters(self, prefix: str = "") -> dict[str, str]:
        found = super().parameters(prefix)
        for mode, config in self.mode_save_configs.items():
            found.update(config.parameters(f"{mode}."))
        return found


class ReductionConfig:
    """What to save of a tensor instead of (or besides, with save_raw_tensor) its raw value."""

    def __init__(self, reductions=None, abs_reductions=None, norms=None, abs_norms=None, save_raw_tensor=False,
                 save_shape=False) -> None:
        self.names = [*(reductions or ()), *(f"abs_{r}" for r in abs_reductions or ()), *(norms or ()),
                      *(f"abs_{n}" for n in abs_norms or ())]
        try:
            coll.parse_reductions(",".join(self.names))
        except ValueError as exc:
            raise ValidationError("ReductionConfig", self.names, str(exc)) from None
        self.save_raw_tensor = save_raw_tensor
        self.save_shape = save_shape  # shapes are always in the index here

    def parameters(self) -> dict[str, str]:
        return {"reductions": ",".join(self.names), "save_raw_tensor": str(bool(self.save_raw_tensor)).lower()}
