"""smdebug's modes: TRAIN, EVAL, PREDICT and GLOBAL. Each is also the plain string stored in the index
("train", ...), so `trial.steps(mode="eval")` and `trial.steps(mode=modes.EVAL)` are the same call."""

from __future__ import annotations

from enum import Enum


class ModeKeys(str, Enum):
    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "predict"
    GLOBAL = "global"


TRAIN, EVAL, PREDICT, GLOBAL = ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT, ModeKeys.GLOBAL
MODES = tuple(m.value for m in ModeKeys)


def parse(mode) -> str:
    """A mode given as a string or a ModeKeys member, as the plain string; ValueError naming the modes."""
    text = mode.value if isinstance(mode, ModeKeys) else str(mode).lower()
    if text.startswith("modekeys."):  # str(ModeKeys.EVAL) on older Pythons, or smdebug's spelling
        text = text[len("modekeys."):]
    if text not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    return text
