"""The job's parallelism configuration as the script sees it: `mp_parameters` (SM_HP_MP_PARAMETERS, from
`smdistributed.modelparallel.parameters`) and the dataparallel flag (SM_FRAMEWORK_PARAMS), validated by
the same rules as the job (shipyard/spec/smdistributed.py). Arguments to prepare() override them."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from shipyard.spec import smdistributed


@dataclass(frozen=True)
class ParallelConfig:
    parameters: dict[str, Any] = field(default_factory=dict)   # canonical names (aliases resolved)
    source: str = "mp_parameters"                               # names the origin in error messages
    explicit: frozenset[str] = frozenset()                      # names given to prepare() itself

    def get(self, name: str, default: Any = None) -> Any:
        return self.parameters.get(name, default)

    def field(self, name: str) -> str:
        return f"prepare.{name}" if name in self.explicit else f"{self.source}.{name}"

    def with_overrides(self, overrides: dict[str, Any]) -> ParallelConfig:
        """Explicit arguments win over the job's configuration, key by key."""
        if not overrides:
            return self
        explicit = smdistributed.check_parameters(overrides, "prepare")
        merged = {**self.parameters, **explicit}
        smdistributed.check_combination(merged, "prepare")
        return ParallelConfig(merged, self.source, frozenset(explicit))


def from_environment(environ: os._Environ | dict[str, str] = os.environ) -> ParallelConfig:
    raw = environ.get("SM_HP_MP_PARAMETERS", "")
    if raw:
        try:
            parameters = json.loads(raw)
        except ValueError:
            # SageMaker's generic Estimator (no source_dir) sends a dict's repr; say so rather than guess.
            from shipyard.errors import ValidationError

            raise ValidationError("SM_HP_MP_PARAMETERS", raw, "must be JSON; pass distribution="
                                  "{'smdistributed': {'modelparallel': {...}}} rather than a hyperparameter") from None
        return ParallelConfig(smdistributed.check_parameters(parameters, "mp_parameters"))
    framework = json.loads(environ.get("SM_FRAMEWORK_PARAMS", "") or "{}")
    if framework.get("sagemaker_distributed_dataparallel_enabled"):
        return ParallelConfig({"ddp": True}, "smdistributed.dataparallel")
    return ParallelConfig()
