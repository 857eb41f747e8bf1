"""In-process tests (world of one) leave no process group or prepared arrangement behind."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_process_group_left():
    yield
    import torch.distributed as dist

    from shipyard.parallel import preparation

    preparation._prepared.clear()
    if dist.is_initialized():
        dist.destroy_process_group()
