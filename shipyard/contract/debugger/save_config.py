"""SageMaker's SaveConfig semantics (smdebug/core/save_config.py), pure and torch-free: a step of a mode
is saved when it is in save_steps, or when start_step <= step < end_step and step % save_interval == 0
(the absolute step, not the offset from start_step). Each mode may override; `global.*` and unprefixed
keys set every mode's default."""

from __future__ import annotations

from dataclasses import dataclass, replace

from shipyard.contract.debugger.modes import MODES

KEYS = ("save_interval", "save_steps", "start_step", "end_step")


@dataclass(frozen=True)
class SaveConfigMode:
    save_interval: int = 500
    save_steps: tuple[int, ...] = ()
    start_step: int = 0
    end_step: int | None = None  # exclusive

    def should_save(self, step: int) -> bool:
        if step in self.save_steps:
            return True
        if step < self.start_step or (self.end_step is not None and step >= self.end_step):
            return False
        return step % self.save_interval == 0


def parse_value(key: str, text: str):
    """One SaveConfig key's value; ValueError with the reason when it is not valid."""
    if key == "save_steps":
        steps = tuple(int(s) for s in str(text).split(",") if s.strip())
        if any(s < 0 for s in steps):
            raise ValueError("save_steps must be non-negative integers")
        return steps
    value = int(text)
    if key == "save_interval" and value < 1:
        raise ValueError("save_interval must be at least 1")
    if value < 0:
        raise ValueError(f"{key} must be non-negative")
    return value


def split_key(key: str) -> tuple[str | None, str]:
    """'train.save_interval' -> ('train', 'save_interval'); 'save_interval' -> (None, 'save_interval')."""
    mode, dot, name = key.partition(".")
    return (mode, name) if dot else (None, key)


@dataclass(frozen=True)
class SaveConfig:
    modes: dict[str, SaveConfigMode]

    @classmethod
    def from_parameters(cls, parameters: dict[str, str], base: SaveConfig | None = None) -> SaveConfig:
        """Unprefixed and global.* keys first (for every mode), then each mode's own keys, over `base`."""
        modes = dict(base.modes) if base else {m: SaveConfigMode() for m in MODES}
        for scope in (None, "global", *[m for m in MODES if m != "global"]):
            for key, text in parameters.items():
                mode, name = split_key(key)
                if mode != scope or name not in KEYS:
                    continue
                targets = MODES if scope in (None, "global") else (scope,)
                for target in targets:
                    modes[target] = replace(modes[target], **{name: parse_value(name, text)})
        return cls(modes)

    def should_save(self, mode: str, step: int) -> bool:
        return self.modes[mode].should_save(step)
