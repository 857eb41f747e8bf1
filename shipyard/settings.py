"""Settings every layer reads from the environment, defined once."""

from __future__ import annotations

import os
from pathlib import Path


def shipyard_home() -> Path:
    """SHIPYARD_HOME (default ~/.shipyard): the store, job directories and the user's instance catalog."""
    return Path(os.environ.get("SHIPYARD_HOME") or Path.home() / ".shipyard").expanduser()


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def local_max_instances() -> int | None:
    """SHIPYARD_LOCAL_MAX_INSTANCES: how many instances this machine runs side by side (default: from its
    CPUs and memory, backends/resources.py)."""
    value = os.environ.get("SHIPYARD_LOCAL_MAX_INSTANCES", "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        from shipyard.errors import ValidationError

        raise ValidationError("SHIPYARD_LOCAL_MAX_INSTANCES", value, "must be a whole number >= 1")
    return int(value)


def s3_read_timeout() -> float | None:
    """SHIPYARD_S3_READ_TIMEOUT: seconds S3 may take to answer a request before it is sent again (default
    botocore's 60). An S3-compatible store that assembles large objects slowly may need more: a retried
    CompleteMultipartUpload of 2 GB races the first one on some (docs/storage.md)."""
    value = os.environ.get("SHIPYARD_S3_READ_TIMEOUT", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        from shipyard.errors import ValidationError

        raise ValidationError("SHIPYARD_S3_READ_TIMEOUT", value, "must be a number of seconds > 0, e.g. 600")
    return seconds


def default_backend() -> str:
    """SHIPYARD_BACKEND (default local): where instances run when a job does not say (`backend=`)."""
    return os.environ.get("SHIPYARD_BACKEND") or "local"


def default_oversubscribe() -> bool:
    """SHIPYARD_OVERSUBSCRIBE (default off): a job that does not say (`oversubscribe=`) may have instances
    sharing this machine's CPUs and memory beyond their types' sizes. For a server whose jobs come through
    SageMaker's API, which has no such field (docs/sagemaker-api.md)."""
    return _flag("SHIPYARD_OVERSUBSCRIBE")


def fastfile_mount() -> str:
    """SHIPYARD_FASTFILE (default auto): what serves FastFile channels. `auto`: the kernel's lazy files where
    the agent may make a fanotify group and the disk takes pre-content events, else rclone; `rclone`:
    rclone's mount always (runtime/fastfile.py)."""
    value = os.environ.get("SHIPYARD_FASTFILE", "").strip() or "auto"
    if value not in ("auto", "rclone"):
        from shipyard.errors import ValidationError

        raise ValidationError("SHIPYARD_FASTFILE", value, "must be auto or rclone")
    return value


def ray_address() -> str:
    """The Ray cluster to run on: SHIPYARD_RAY_ADDRESS, else RAY_ADDRESS, else "auto" (a cluster started
    on this machine with `ray start --head`)."""
    return os.environ.get("SHIPYARD_RAY_ADDRESS") or os.environ.get("RAY_ADDRESS") or "auto"


def ray_address_given() -> bool:
    """Whether a Ray cluster is named (SHIPYARD_RAY_ADDRESS or RAY_ADDRESS): only then is a job this machine
    does not have looked for on the cluster's home (control/cluster_home.py)."""
    return bool(os.environ.get("SHIPYARD_RAY_ADDRESS") or os.environ.get("RAY_ADDRESS"))


def ray_pack() -> bool:
    """SHIPYARD_RAY_PACK=1: let instances share a node when the cluster has fewer nodes than instances."""
    return _flag("SHIPYARD_RAY_PACK")


def forwarded() -> dict[str, str]:
    """What a job's parts on other machines get of the submitting environment (a Ray node's agent, a
    controller on the cluster's head): storage endpoints and credentials, and shipyard's settings."""
    return {k: v for k, v in os.environ.items() if k.startswith(("SHIPYARD_", "AWS_"))}


def ray_shared_storage() -> bool:
    """SHIPYARD_RAY_SHARED_STORAGE=1: the user says file:// paths are on storage every Ray node mounts."""
    return _flag("SHIPYARD_RAY_SHARED_STORAGE")


def ray_node_dir() -> str:
    """SHIPYARD_RAY_NODE_DIR (default /tmp/shipyard-ray): where instances keep their files on a Ray node."""
    return os.environ.get("SHIPYARD_RAY_NODE_DIR") or "/tmp/shipyard-ray"


def ray_cluster_home() -> str:
    """SHIPYARD_RAY_HOME (default <SHIPYARD_RAY_NODE_DIR>/home): on a Ray cluster's head, the home of the jobs
    whose controller lives there (control/cluster_home.py); read where the home is first made."""
    return os.environ.get("SHIPYARD_RAY_HOME") or f"{ray_node_dir()}/home"


def smtp_url() -> str | None:
    """SHIPYARD_SMTP_URL (smtp://[user:password@]host[:port], smtps:// for TLS): where rules' Email actions
    are sent from (docs/debugger.md)."""
    return os.environ.get("SHIPYARD_SMTP_URL") or None


def notify_from() -> str:
    """SHIPYARD_NOTIFY_FROM (default shipyard@localhost): the sender of rules' Email actions."""
    return os.environ.get("SHIPYARD_NOTIFY_FROM") or "shipyard@localhost"


def sms_webhook_url() -> str | None:
    """SHIPYARD_SMS_WEBHOOK_URL: where rules' SMS actions are POSTed (an SMS gateway's HTTP endpoint)."""
    return os.environ.get("SHIPYARD_SMS_WEBHOOK_URL") or None
