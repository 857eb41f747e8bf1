"""`shipyard plan JOB.yaml --calibrate` as a user runs it: the job's own DDP script is measured on 1 and
2 local instances (real jobs, the profiler's step timeline, each stopped after a few steps), and the
plan's options for its own type come from those measurements; a script that fails shows its error."""

from __future__ import annotations

import json
import textwrap

import pytest
from click.testing import CliRunner

from shipyard.cli.main import cli
from shipyard.store import Store

pytestmark = pytest.mark.slow

SCRIPT = """
    import time
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(5000):
        loss = model(torch.randn(8, 64)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(0.002)   # 5000 steps: longer than the calibration lets it run
"""


def _job(tmp_path, script: str) -> str:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(textwrap.dedent(script))
    (tmp_path / "job.yaml").write_text(f"entry_point: train.py\nsource_dir: {tmp_path / 'src'}\n"
                                       "distribution: {torch_distributed: {enabled: true}}\n"
                                       "environment: {OMP_NUM_THREADS: '1'}\nstop_grace_seconds: 2\n")
    return str(tmp_path / "job.yaml")


def test_calibrate_measures_the_job_on_one_and_two_instances(home, tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["plan", _job(tmp_path, SCRIPT), "--deadline", "1h", "--calibrate", "--steps", "5000",
                                 "--no-interruptions", "--max-instances", "4", "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    options = answer["options"]
    measures = {m["instances"]: m for m in answer["calibration"]["measures"]}
    assert set(measures) == {1, 2} and all(m["steps"] >= 20 and m["step_seconds"] > 0 for m in measures.values())
    # the model's size and one step's activations, measured in the script's own process
    assert measures[1]["parameters"] == 64 * 64 + 64
    assert measures[1]["activation_bytes"] == 4 * (8 * 64 + 8 * 64)   # Linear's input, pow's input
    assert {(o["instance_type"], o["instance_count"]) for o in options} == {("local", 1), ("local", 2), ("local", 4)}
    assert all(o["strategy"] == "ddp (calibrated)" and 0 < o["hours"] < 1 for o in options)
    store = Store()
    runs = {r.name.rsplit("-calibrate-", 1)[1].split("-")[0]: r for r in store.list_jobs()}
    assert set(runs) == {"1", "2"}   # two real jobs, each stopped once it had its steps
    for count, listed in runs.items():
        record = store.get_job(listed.name)
        assert record.spec.instance_count == int(count) and record.status == "Stopped"
        assert record.transitions[-1].message == "calibrated: enough steps measured"


def test_a_calibration_run_that_fails_shows_the_script_s_error(home, tmp_path):
    result = CliRunner().invoke(cli, ["plan", _job(tmp_path, "raise SystemExit('no data here')\n"), "--deadline", "1h",
                                      "--calibrate", "--steps", "100"])
    assert result.exit_code == 2
    assert "the calibration run on 1 instance(s) failed: AlgorithmError" in result.output
    assert "no data here" in result.output
