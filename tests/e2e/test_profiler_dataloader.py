"""The Dataloader rule end to end, through the SDK: a loop starved by its DataLoader (each item takes
time and num_workers=0, so one process loads for all the cores) is IssuesFound in describe's
ProfilerRuleEvaluationStatuses; the same loop with a worker per core is not."""

from __future__ import annotations

import math
import os
import re
import textwrap

import pytest

from shipyard.profiler import FrameworkProfile, ProfilerConfig, ProfilerRule, rule_configs
from shipyard.pytorch import PyTorch

pytestmark = pytest.mark.slow

SCRIPT = """
    import argparse
    import time
    import torch
    from torch.utils.data import DataLoader, Dataset

    parser = argparse.ArgumentParser()
    parser.add_argument("--num_workers", type=int)
    parser.add_argument("--batches", type=int)
    args, _ = parser.parse_known_args()

    class Slow(Dataset):
        def __len__(self):
            return 8 * args.batches

        def __getitem__(self, i):
            time.sleep(0.02)  # reading and decoding an item
            return torch.randn(4)

    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if __name__ == "__main__":
        for x in DataLoader(Slow(), batch_size=8, num_workers=args.num_workers):
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""


# The step timeline and the dataloader's events, without the default torch.profiler and cProfile steps:
# starting them stalls the loop for seconds, which would blur the per-second process counts measured here.
TIMELINE_ONLY = FrameworkProfile(detailed_profiling_config={"start_step": 10**9},
                                 python_profiling_config={"start_step": 10**9})


def _status(tmp_path, num_workers: int, batches: int) -> dict:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent(SCRIPT))
    est = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=1, framework_version="2.1",
                  py_version="py3", output_path=str(tmp_path / "out"),
                  hyperparameters={"num_workers": num_workers, "batches": batches},
                  profiler_config=ProfilerConfig(system_monitor_interval_millis=500,
                                                 framework_profile_params=TIMELINE_ONLY),
                  rules=[ProfilerRule.sagemaker(rule_configs.Dataloader(), rule_parameters={"patience": 2})])
    est.fit(logs=False)
    description = est.latest_training_job.describe()
    assert description["TrainingJobStatus"] == "Completed"
    [status] = description["ProfilerRuleEvaluationStatuses"]
    return status


def test_a_dataloader_starved_loop_is_found(home, tmp_path):
    status = _status(tmp_path, num_workers=0, batches=30)  # 0.16 s a batch, ~5 s
    assert status["RuleConfigurationName"] == "Dataloader"
    assert status["RuleEvaluationStatus"] == "IssuesFound", status
    assert "Evaluation of the rule Dataloader resulted in the condition being met: algo-1: median 1 parallel " \
           f"dataloader processes for {os.cpu_count()} cores" in status["StatusDetails"]


def test_a_worker_per_core_is_not(home, tmp_path):
    cores = os.cpu_count()
    status = _status(tmp_path, num_workers=cores, batches=30 * cores)  # each worker ~5 s of loading
    assert status["RuleEvaluationStatus"] == "NoIssuesFound", status
    # the workers and the main process, at most: a second at the start or the end may see fewer busy
    median = int(re.search(r"median (\d+) parallel dataloader processes for (\d+) cores", status["StatusDetails"])[1])
    assert math.ceil(0.7 * cores) <= median <= cores + 1, status
