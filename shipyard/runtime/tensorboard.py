"""The instance side of TensorBoardOutputConfig: the script's TensorBoard directory (/opt/ml/output/tensorboard
by default) mirrored to <s3_output_path>/<job>/tensorboard-output/ while the job runs, as SageMaker does
(CheckpointSync: whole files, as they settle; the last ones when the script has ended)."""

from __future__ import annotations

from pathlib import Path


def agent_settings(spec) -> dict | None:
    config = spec.tensorboard_output_config
    if config is None:
        return None
    return {"LocalPath": config.container_local_output_path, "S3OutputPath": config.output_uri(spec.job_name)}


def start(settings: dict, config, config_dir: Path):
    """config: the instance's AgentConfig. Returns the sync, whose finish(timeout) the agent calls when the
    script has ended."""
    from shipyard.runtime.checkpoints import CheckpointSync

    local = config.local(settings["LocalPath"])
    local.mkdir(parents=True, exist_ok=True)
    sync = CheckpointSync(local, settings["S3OutputPath"])
    sync.start()
    return sync


def script_environment(_settings: dict, _base: str) -> dict[str, str]:
    return {}
