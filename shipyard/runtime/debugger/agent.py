"""The instance side of the debugger: the agent writes the hook config where SageMaker does
(/opt/ml/input/config/debughookconfig.json), points the training processes at it, and mirrors the
tensors directory to <output>/<job>/debug-output/ while the job runs (CheckpointSync, whole files)."""

from __future__ import annotations

import json
from pathlib import Path

from shipyard.contract.debugger.storage import parse_index_key
from shipyard.spec.debugger import debug_output_uri

CONFIG_FILE = "debughookconfig.json"


def agent_settings(spec) -> dict | None:
    hook = spec.debugger_hook_config
    if hook is None:
        return None
    return {
        "LocalPath": hook.container_local_output_path,
        "S3OutputPath": debug_output_uri(spec.output_path, spec.job_name, hook.s3_output_path),
        "HookParameters": dict(hook.hook_parameters),
        "CollectionConfigurations": [{"CollectionName": c.name, "CollectionParameters": dict(c.parameters)}
                                     for c in hook.collection_configs],
    }


def start(settings: dict, config, config_dir: Path):
    """config: the instance's AgentConfig. Returns the sync, whose finish(timeout) the agent calls when the
    script has ended."""
    from shipyard.runtime.checkpoints import CheckpointSync

    local = config.local(settings["LocalPath"])
    local.mkdir(parents=True, exist_ok=True)
    (config_dir / CONFIG_FILE).write_text(json.dumps({**settings, "LocalPath": str(local)}))
    # An uploaded index names a complete step (storage.py): it goes up after the tensors it names, and a
    # step's indexes (one per worker) before the next step's.
    sync = CheckpointSync(local, settings["S3OutputPath"], last=_index_step)
    sync.start()
    return sync


def _index_step(rel: str) -> str | None:
    key = parse_index_key(rel)
    return f"{key[0]:012d}" if key else None


def script_environment(_settings: dict, base: str) -> dict[str, str]:
    from shipyard.contract.layout import Layout

    return {"SMDEBUG_CONFIG_FILE_PATH": str(Layout(Path(base)).input_config_dir / CONFIG_FILE)}
