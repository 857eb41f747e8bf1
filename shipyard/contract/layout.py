"""The /opt/ml directory tree (spec 1.2). Outside a sandbox the same tree lives under the instance's
own directory, so every path is relative to `base`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from shipyard.errors import ValidationError

SANDBOX_BASE = Path("/opt/ml")
# The empty file a script writes last in a multi-file checkpoint directory under checkpoints_dir: the
# checkpoint sync and shipyard.parallel treat a directory as a checkpoint only once it is there.
MARKER = ".complete"


@dataclass(frozen=True)
class Layout:
    base: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", Path(self.base))

    @property
    def input_dir(self) -> Path:
        return self.base / "input"

    @property
    def input_config_dir(self) -> Path:
        return self.input_dir / "config"

    @property
    def input_data_dir(self) -> Path:
        return self.input_dir / "data"

    @property
    def code_dir(self) -> Path:
        return self.base / "code"

    @property
    def model_dir(self) -> Path:
        return self.base / "model"

    @property
    def output_dir(self) -> Path:
        return self.base / "output"

    @property
    def output_data_dir(self) -> Path:
        # No per-host subdirectory: the toolkit's own docs showing output/data/algo-1 are stale.
        return self.output_dir / "data"

    @property
    def output_intermediate_dir(self) -> Path:
        return self.output_dir / "intermediate"

    @property
    def checkpoints_dir(self) -> Path:
        return self.base / "checkpoints"

    @property
    def failure_file(self) -> Path:
        return self.output_dir / "failure"

    @property
    def success_file(self) -> Path:
        return self.output_dir / "success"

    @property
    def hyperparameters_file(self) -> Path:
        return self.input_config_dir / "hyperparameters.json"

    @property
    def resourceconfig_file(self) -> Path:
        return self.input_config_dir / "resourceconfig.json"

    @property
    def inputdataconfig_file(self) -> Path:
        return self.input_config_dir / "inputdataconfig.json"

    @property
    def checkpointconfig_file(self) -> Path:
        return self.input_config_dir / "checkpointconfig.json"

    def channel_dir(self, name: str) -> Path:
        # The channel-name pattern admits "." and "..", which would leave input/data.
        if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise ValidationError("channel", name, "a channel name must be a single path component")
        return self.input_data_dir / name

    def create(self, channels: Iterable[str] = ()) -> None:
        dirs = [self.input_config_dir, self.input_data_dir, self.code_dir, self.model_dir,
                self.output_data_dir, self.output_intermediate_dir, self.checkpoints_dir]
        dirs += [self.channel_dir(name) for name in channels]
        for path in dirs:
            path.mkdir(parents=True, exist_ok=True)
