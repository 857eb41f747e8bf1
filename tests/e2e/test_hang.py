"""A rank that stops while the others wait in a collective is noticed within the hang timeout (not
gloo's 30 minutes), and the failure names the host and rank that hung."""

from __future__ import annotations

import textwrap
import time

import pytest

from shipyard.errors import UnexpectedStatusError
from shipyard.pytorch import PyTorch

pytestmark = pytest.mark.slow

SCRIPT = """
    import os, time
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 1000):
        if step == 5 and dist.get_rank() == 1:
            time.sleep(3600)  # stuck: never reaches the allreduce in backward
        loss = model(torch.randn(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(0.05)
"""


def test_hung_rank_is_named_within_the_timeout(home, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent(SCRIPT))
    est = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=2,
                  distribution={"torch_distributed": {"enabled": True}}, hang_timeout_seconds=8,
                  stop_grace_seconds=5)
    started = time.monotonic()
    with pytest.raises(UnexpectedStatusError) as failure:
        est.fit(logs=False)
    assert time.monotonic() - started < 120
    reason = failure.value.reason
    assert reason.startswith("AlgorithmError: Hang: no rank made progress for 8 s (last optimizer step 4)"), reason
    assert "rank 1 on algo-2" in reason and "is not waiting for the others: it is at train.py:" in reason
    assert "rank 0 waits in a collective" in reason
