"""TrainingInput, FileSystemInput and ShuffleConfig, as SageMaker's (`sagemaker.inputs`): one data channel,
and how its objects are ordered."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ShuffleConfig:
    """The objects (prefix matches, manifest entries or augmented-manifest lines) in an order drawn from
    `seed`; in Pipe mode a new order every epoch."""

    seed: int


@dataclass(frozen=True)
class TrainingInput:
    s3_data: str
    distribution: str | None = None
    compression: str | None = None
    content_type: str | None = None
    record_wrapping: str | None = None
    s3_data_type: str = "S3Prefix"
    instance_groups: list[str] | None = None
    input_mode: str | None = None
    attribute_names: list[str] | None = None
    target_attribute_name: str | None = None
    shuffle_config: ShuffleConfig | None = None


@dataclass(frozen=True)
class FileSystemInput:
    """A file system channel (EFS, FSx for Lustre on SageMaker): here `directory_path` is a directory of
    this machine (a local disk or an NFS mount), shown read-only at /opt/ml/input/data/<channel>;
    `file_system_id` names it in describe()."""

    file_system_id: str
    file_system_type: str
    directory_path: str
    file_system_access_mode: str = "ro"
    content_type: str | None = None
