"""The profiler's part of the instance agent: write /opt/ml/input/config/profilerconfig.json, run the
system monitor, and mirror /opt/ml/output/profiler to the job's profiler-output URI while the job runs
(the checkpoint sync, which uploads each file whole). Started only when the job asks for profiling."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from shipyard.runtime.checkpoints import CheckpointSync
from shipyard.runtime.profiler.monitor import SystemMonitor
from shipyard.runtime.profiler.steps import FRAMEWORK_FILE

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


def _write_config(settings: dict | None, input_config_dir: Path) -> None:
    """/opt/ml/input/config/profilerconfig.json, SageMaker's ProfilerConfig (DisableProfiler when off)."""
    input_config_dir.mkdir(parents=True, exist_ok=True)
    api = settings["api"] if settings else {"DisableProfiler": True}
    tmp = input_config_dir / ".profilerconfig.json.tmp"
    tmp.write_text(json.dumps(api, indent=2))
    os.replace(tmp, input_config_dir / "profilerconfig.json")


def start(settings: dict, config, input_config_dir: Path) -> ProfilerRun:
    """config: the instance's AgentConfig (its base directory, host name and GPUs)."""
    _write_config(settings, input_config_dir)
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


def update(running: ProfilerRun | None, settings: dict | None, config, input_config_dir: Path) -> ProfilerRun | None:
    """The job's profiling was updated while it runs (settings None: turned off). The running monitor
    follows it (a new interval, or no samples while off); with none running, one starts. Training
    processes that record framework metrics follow FRAMEWORK_FILE. Returns the run started, if any."""
    _write_config(settings, input_config_dir)
    framework = settings.get("framework") if settings else None
    tmp = Path(config.instance_dir) / f".{FRAMEWORK_FILE}.tmp"
    tmp.write_text(json.dumps(framework))
    os.replace(tmp, Path(config.instance_dir) / FRAMEWORK_FILE)
    if running is not None:
        running.monitor.follow(settings["interval_millis"] if settings else None)
        return None
    return start(settings, config, input_config_dir) if settings else None


def describe(settings: dict | None) -> str:
    """A log line's account of the profiling now in force."""
    if not settings:
        return "off"
    framework = "framework metrics on" if settings.get("framework") else "no framework metrics"
    return f"system metrics every {settings['interval_millis']} ms, {framework}, to {settings['uri']}"
