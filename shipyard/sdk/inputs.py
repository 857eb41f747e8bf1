"""TrainingInput, as SageMaker's: one data channel."""

from __future__ import annotations

from dataclasses import dataclass


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
    shuffle_config: object | None = None
