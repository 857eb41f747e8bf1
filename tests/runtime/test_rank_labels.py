"""A host of several processes labels each one's lines in its log (`algo-1[1] | ...`, torchrun's --tee with
its prefix template); one of a single process leaves them as they are. Metric regexes, `^` anchored ones
too, match what the script printed either way (tests/e2e/test_log_labels.py runs a real job)."""

from __future__ import annotations

import pytest

from shipyard.contract import hyperparameters as hp
from shipyard.contract.config import resource_config
from shipyard.contract.environment import TrainingEnvironment
from shipyard.contract.layout import Layout
from shipyard.control.metrics import LogScraper
from shipyard.runtime.launchers import LaunchContext, get
from shipyard.runtime.launchers.base import split_rank_label
from shipyard.spec.job import MetricDefinition


def _env(tmp_path, processes: int) -> TrainingEnvironment:
    hyperparameters = hp.encode_json({
        "sagemaker_program": "train.py", "sagemaker_submit_directory": "file:///code/sourcedir.tar.gz",
        "sagemaker_torch_distributed_enabled": True, "sagemaker_mpi_num_of_processes_per_host": processes})
    return TrainingEnvironment(
        layout=Layout(tmp_path / "ml"), hyperparameters=hyperparameters,
        resource_config=resource_config("algo-2", ["algo-1", "algo-2"], "local", "lo"), input_data_config={},
        job_name="labels", num_gpus=0, num_cpus=2)


def _plan(tmp_path, processes: int, instance_dir: str | None = "/jobs/labels/instances/algo-2"):
    context = LaunchContext(master_port=1, host_addresses={"algo-1": "127.0.1.1", "algo-2": "127.0.1.2"},
                            sandboxed=True, instance_dir=instance_dir)
    return get("torch_distributed").plan(_env(tmp_path, processes), context)


def test_torchrun_labels_the_lines_of_several_processes_keeping_the_toolkit_s_command_line(tmp_path):
    several, one = _plan(tmp_path, 2), _plan(tmp_path, 1)
    assert several.env["PET_TEE"] == "3"   # stdout and stderr of every local rank
    assert several.env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "algo-2[${local_rank}] | "
    assert several.env["PET_LOG_DIR"] == "/jobs/labels/instances/algo-2/torchrun"
    assert "PET_LOG_DIR" not in _plan(tmp_path, 2, instance_dir=None).env   # torchrun's temporary directory
    assert not {"PET_TEE", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "PET_LOG_DIR"} & set(one.env)
    count = one.argv.index("--nproc_per_node") + 1   # the same command but for the count
    assert (several.argv[count], one.argv[count]) == ("2", "1")
    assert several.argv[:count] + several.argv[count + 1:] == one.argv[:count] + one.argv[count + 1:]


@pytest.mark.parametrize(("line", "split"), [
    ("algo-1[1] | loss=0.5", ("algo-1[1]", "loss=0.5")),
    ("algo-1[12] | ", ("algo-1[12]", "")),
    ("algo-1[0] | algo-1[1] | nested", ("algo-1[0]", "algo-1[1] | nested")),
    ("loss=0.5", (None, "loss=0.5")),
    ("algo-2[1] | another host's label", (None, "algo-2[1] | another host's label")),
    ("algo-1[x] | not a rank", (None, "algo-1[x] | not a rank")),
    ("algo-1[1]| no separator", (None, "algo-1[1]| no separator")),
])
def test_a_line_s_label_is_told_from_its_text(line, split):
    assert split_rank_label("algo-1", line) == split


def test_metric_regexes_match_labelled_lines_anchored_or_not(tmp_path):
    log = tmp_path / "algo-1.log"
    log.write_text("algo-1[0] | loss=0.5\nalgo-1[1] | loss=0.25 acc=0.9\nloss=0.125\n"
                   "2026-11-25 12:00:00.000 shipyard-agent INFO running: torchrun\n")
    scraper = LogScraper("algo-1", log, (MetricDefinition(name="loss", regex=r"^loss=([0-9.]+)"),
                                         MetricDefinition(name="acc", regex=r"acc=([0-9.]+)")))
    rows = scraper.scrape()
    assert [(name, value) for name, _, _, value in rows] == [("loss", 0.5), ("loss", 0.25), ("acc", 0.9),
                                                            ("loss", 0.125)]
    assert {host for _, host, _, _ in rows} == {"algo-1"}
