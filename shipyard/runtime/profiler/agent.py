"""The profiler's part of the instance agent: write /opt/ml/input/config/profilerconfig.json, run the
system monitor, and mirror /opt/ml/output/profiler to the job's profiler-output URI while the job runs
(the checkpoint sync, which uploads each file whole). Started only when the job asks for profiling."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from shipyard.runtime.checkpoints import CheckpointSync
from shipyard.runtime.profiler.monitor import SystemMonitor

SYNC_INTERVAL_SECONDS = 1.0


def local_dir(base: str) -> Path:
    """/opt/ml/output/profiler as this process sees it."""
    return Path(base) / "output" / "profiler"


@dataclass
class ProfilerRun:
    monitor: SystemMonitor
    sync: CheckpointSync

    def finish(self, timeout: float) -> bool:
        self.monitor.stop()
        return self.sync.finish(timeout)


def start(settings: dict, config, input_config_dir: Path) -> ProfilerRun:
    """config: the instance's AgentConfig (its base directory, host name and GPUs)."""
    input_config_dir.mkdir(parents=True, exist_ok=True)
    (input_config_dir / "profilerconfig.json").write_text(json.dumps(settings["api"], indent=2))
    root = local_dir(config.base)
    root.mkdir(parents=True, exist_ok=True)
    monitor = SystemMonitor(root, config.host, settings["interval_millis"], tuple(config.gpu_ids))
    sync = CheckpointSync(root, settings["uri"], interval=SYNC_INTERVAL_SECONDS)
    monitor.start()
    sync.start()
    return ProfilerRun(monitor, sync)


def script_environment(settings: dict, base: str) -> dict[str, str]:
    """What the training processes need to record step times (nothing when framework metrics are off)."""
    if settings.get("framework") is None:
        return {}
    return {"SHIPYARD_PROFILER_DIR": str(local_dir(base)),
            "SHIPYARD_PROFILER_FRAMEWORK": json.dumps(settings["framework"])}
