"""A real job of one instance running two processes (torchrun): each process's lines carry its label in the
host's log (`algo-1[0] | ...`, `algo-1[1] | ...`) and fit(logs=True) shows them so; an anchored metric
regex still matches; torch.profiler's own chatter stays out of the log; the source upload and the
downloads are shown as readable progress, never as raw byte counts."""

from __future__ import annotations

import re

from shipyard.pytorch import PyTorch
from shipyard.store import Store

SCRIPT = """\
import os
import sys

rank = os.environ["LOCAL_RANK"]
for i in range(20):
    print(f"line {i} of rank {rank}", flush=True)
print(f"a warning of rank {rank}", file=sys.stderr, flush=True)
if rank == "1":
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]):   # kineto would print its USDT/STAGE lines here
        torch.ones(8) @ torch.ones(8)
    print("loss=0.25", flush=True)
"""


def test_each_process_of_a_host_labels_its_lines(home, tmp_path, capsys):
    source, data = tmp_path / "src", tmp_path / "data"
    source.mkdir()
    data.mkdir()
    (source / "train.py").write_text(SCRIPT)
    (data / "part-0.bin").write_bytes(b"x" * 3_000_000)
    est = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=1, instance_type="local",
                  distribution={"torch_distributed": {"enabled": True, "processes_per_host": 2}},
                  metric_definitions=[{"Name": "loss", "Regex": "^loss=([0-9.]+)$"}])
    est.fit({"train": f"file://{data}"}, logs=True)
    job = est.latest_training_job

    log = Store().log_path(job.name, "algo-1").read_text().splitlines()
    for rank in (0, 1):   # every line of each process, in order, labelled
        assert [line for line in log if "| line " in line and line.endswith(f"of rank {rank}")] == [
            f"algo-1[{rank}] | line {i} of rank {rank}" for i in range(20)]
        assert f"algo-1[{rank}] | a warning of rank {rank}" in log
    assert not any(re.search(r"USDT:|STAGE:|ActivityProfiler", line) for line in log), log
    final = {m["MetricName"]: m["Value"] for m in job.describe()["FinalMetricDataList"]}
    assert final == {"loss": 0.25}

    shown = capsys.readouterr()
    lines = shown.out.splitlines()
    assert "algo-1[0] | line 0 of rank 0" in lines and "algo-1[1] | loss=0.25" in lines
    assert any(line.startswith("algo-1 | download train: 3.0 of 3.0 MB (100%), ") for line in lines), lines
    assert any(re.match(r"algo-1 \| .* code: 1 files extracted from file://.*/sourcedir\.tar\.gz$", line)
               for line in lines), lines   # local code: extracted where it is, nothing to download
    assert not re.search(r"\d+/\d+ bytes", shown.out)
    assert re.search(r"^upload code: .* \(100%\)", shown.err, re.MULTILINE), shown.err
