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


KILLABLE = """
    import os, time
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 3000):  # bounded, should the test fail before the kill
        loss = model(torch.randn(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and step % 10 == 0:
            torch.save({"step": step, "model": model.state_dict()}, f"/opt/ml/checkpoints/step-{step:05d}.pt")
            print(f"checkpoint {step}", flush=True)
        time.sleep(0.05)
"""


def _rank_process(job: str, rank: int):
    """The host's view of one training process (pids inside a sandbox are another namespace's)."""
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        try:
            env = proc.environ() if "train.py" in (proc.info["cmdline"] or []) else {}
        except psutil.Error:
            continue
        if env.get("TRAINING_JOB_NAME") == job and env.get("RANK") == str(rank):
            return proc
    raise AssertionError(f"no rank {rank} process of {job}")


def test_killed_training_process_fails_the_job_naming_its_host_and_keeps_checkpoints(home, tmp_path,
                                                                                     wait_for_line):
    """kill -9 of one rank: the job fails soon (the survivor's collective breaks), naming the host whose
    process was killed and the signal; every checkpoint written before is in the checkpoint URI."""
    import torch

    from shipyard.store import Store

    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent(KILLABLE))
    ckpt = tmp_path / "ckpt"
    est = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=2, stop_grace_seconds=5,
                  distribution={"torch_distributed": {"enabled": True}}, checkpoint_s3_uri=f"file://{ckpt}")
    est.fit(wait=False)
    job = est.latest_training_job
    log = Store().log_path(job.name, "algo-1")
    wait_for_line(log, "checkpoint 30", timeout=120)
    _rank_process(job.name, rank=1).kill()   # on algo-2
    started = time.monotonic()
    with pytest.raises(UnexpectedStatusError) as failure:
        job.wait(logs=False)
    assert time.monotonic() - started < 60
    assert failure.value.reason.startswith("AlgorithmError: algo-2"), failure.value.reason
    assert "SIGKILL" in failure.value.reason or "137" in failure.value.reason or "-9" in failure.value.reason
    written = sorted(int(line.split()[-1]) for line in log.read_text().splitlines() if line.startswith("checkpoint "))
    remote = sorted(int(p.stem.split("-")[1]) for p in ckpt.glob("step-*.pt"))
    assert remote == written  # the final flush uploaded every checkpoint written before the failure
    assert torch.load(ckpt / f"step-{written[-1]:05d}.pt")["step"] == written[-1]
