"""`InstanceGroup`, as SageMaker's `sagemaker.instance_group`: one group of a heterogeneous cluster
(docs/heterogeneous-clusters.md)."""

from __future__ import annotations

from typing import Any


class InstanceGroup:
    """`instance_count` instances of `instance_type`, named `instance_group_name`: give a list of these as
    an estimator's `instance_groups` (instead of instance_type and instance_count)."""

    def __init__(self, instance_group_name: str | None = None, instance_type: str | None = None,
                 instance_count: int | None = None) -> None:
        self.instance_group_name = instance_group_name
        self.instance_type = instance_type
        self.instance_count = instance_count

    def _to_request_dict(self) -> dict[str, Any]:
        """ResourceConfig.InstanceGroups' entry, as SageMaker's SDK sends it."""
        return {"InstanceGroupName": self.instance_group_name, "InstanceType": self.instance_type,
                "InstanceCount": self.instance_count}

    def __repr__(self) -> str:
        return (f"InstanceGroup(instance_group_name={self.instance_group_name!r}, "
                f"instance_type={self.instance_type!r}, instance_count={self.instance_count!r})")


__all__ = ["InstanceGroup"]
