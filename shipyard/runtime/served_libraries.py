"""SageMaker's own libraries, served to a job's Python processes by shipyard's modules of the same API
(shipyard/runtime/libraries/): scripts that import `smdistributed`, `smdebug`, `sagemaker_training`,
`sagemaker_tensorflow` or `torch.sagemaker` run unchanged.

They are found last: `install()` (called by the injected sitecustomize in every process of a job) appends a
finder to sys.meta_path, after Python's own, so a user who installed the real package gets the real
package, and nothing is installed into the user's environment."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

LIBRARIES = Path(__file__).parent / "libraries"

# module name a script imports -> the directory under LIBRARIES that serves it
SERVED = {
    "sagemaker_tensorflow": "sagemaker_tensorflow",
    "sagemaker_training": "sagemaker_training",
    "smdebug": "smdebug",
    "smdistributed": "smdistributed",
    "torch.sagemaker": "torch_sagemaker",
}


class _Fallback:
    """A meta path finder asked only after every other finder found nothing."""

    def find_spec(self, name, path, target=None):
        directory = SERVED.get(name)
        if directory is None:
            return None
        location = LIBRARIES / directory
        return importlib.util.spec_from_file_location(
            name, location / "__init__.py", submodule_search_locations=[str(location)])


def install() -> None:
    if not any(isinstance(finder, _Fallback) for finder in sys.meta_path):
        sys.meta_path.append(_Fallback())
