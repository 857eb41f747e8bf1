"""`shipyard tune` and `shipyard tuning ...`: a tuning.yaml is a job file with a `tuning:` section;
--dry-run shows the first trials as their scripts get them; a detached tuning job is followed, listed,
described and stopped from other commands; a bad file gets the key, the value and the fix."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from shipyard.cli.main import cli

SCRIPTS = Path(__file__).resolve().parents[1] / "tuning" / "scripts"

TUNING = f"""\
framework: none
entry_point: objective.py
source_dir: {SCRIPTS}
hyperparameters: {{epochs: 2, epoch-seconds: 0.05}}
metric_definitions: [{{Name: loss, Regex: "loss=([0-9.]+)"}}]
tuning:
  objective_metric_name: loss
  objective_type: Minimize
  strategy: Random
  max_jobs: 3
  max_parallel_jobs: 3
  random_seed: 7
  hyperparameter_ranges:
    lr: {{min_value: 0.0001, max_value: 0.1, scaling_type: Logarithmic}}
    width: {{min_value: 8, max_value: 64}}
    optimizer: {{values: [sgd, adam]}}
"""


def _file(tmp_path, text=TUNING, **replace) -> str:
    for old, new in replace.items():
        text = text.replace(old, new)
    path = tmp_path / "tuning.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_dry_run_prints_the_first_trials_as_scripts_get_them(runner, home, tmp_path):
    result = runner.invoke(cli, ["tune", _file(tmp_path), "--dry-run", "--trials", "2", "--json"])
    assert result.exit_code == 0, result.output
    trials = json.loads(result.output)
    assert len(trials) == 2
    for trial in trials:
        assert 1e-4 <= json.loads(trial["lr"]) <= 0.1 and isinstance(json.loads(trial["width"]), int)
        assert trial["optimizer"] in ('"sgd"', '"adam"') and trial["epochs"] == "2"
    again = runner.invoke(cli, ["tune", _file(tmp_path), "--dry-run", "--trials", "2", "--json"])
    assert json.loads(again.output) == trials  # random_seed reproduces them
    assert not (home / "tuning").exists()  # nothing was submitted


@pytest.mark.slow
def test_a_detached_tuning_job_is_followed_from_other_commands(runner, home, tmp_path):
    submitted = runner.invoke(cli, ["tune", _file(tmp_path), "--job-name", "cli-tune", "--detach"])
    assert submitted.exit_code == 0, submitted.output
    assert submitted.output.strip() == "cli-tune"
    waited = runner.invoke(cli, ["tuning", "wait", "cli-tune"])
    assert waited.exit_code == 0, waited.output
    assert "best: cli-tune-00" in waited.output
    listed = runner.invoke(cli, ["tuning", "list"])
    assert "cli-tune" in listed.output and "Completed" in listed.output and "3/3" in listed.output
    jobs = runner.invoke(cli, ["tuning", "jobs", "cli-tune"])
    assert jobs.output.count("cli-tune-00") == 3 and "optimizer=" in jobs.output
    [row] = json.loads(runner.invoke(cli, ["tuning", "list", "-o", "json"]).output)
    assert (row["name"], row["status"], row["jobs_ended"], row["jobs"]) == ("cli-tune", "Completed", 3, 3)
    assert row["best_job"].startswith("cli-tune-00") and isinstance(row["best_objective"], float)
    trials = json.loads(runner.invoke(cli, ["tuning", "jobs", "cli-tune", "-o", "json"]).output)
    assert len(trials) == 3 and all(t["TrainingJobName"].startswith("cli-tune-00") for t in trials)
    assert all("optimizer" in t["TunedHyperParameters"] for t in trials)
    description = json.loads(runner.invoke(cli, ["tuning", "describe", "cli-tune"]).output)
    assert description["HyperParameterTuningJobStatus"] == "Completed"
    assert description["TrainingJobStatusCounters"]["Completed"] == 3
    stopped = runner.invoke(cli, ["tuning", "stop", "cli-tune"])
    assert stopped.exit_code == 2 and "already ended Completed" in stopped.output
    trial = trials[0]["TrainingJobName"]
    refused = runner.invoke(cli, ["jobs", "delete", trial])
    assert refused.exit_code == 2 and "shipyard tuning delete cli-tune" in refused.stderr
    deleted = runner.invoke(cli, ["tuning", "delete", "cli-tune"])
    assert deleted.exit_code == 0 and deleted.output == "deleted cli-tune and its 3 training job(s)\n"
    assert json.loads(runner.invoke(cli, ["jobs", "list", "-o", "json"]).output) == []
    assert json.loads(runner.invoke(cli, ["tuning", "list", "-o", "json"]).output) == []


@pytest.mark.slow
def test_a_tuning_job_whose_trials_all_fail_exits_1_saying_why(runner, home, tmp_path):
    tuning = _file(tmp_path, **{"{epochs: 2, epoch-seconds: 0.05}": "{epochs: 1, fail: 1}", "max_jobs: 3": "max_jobs: 2",
                                "max_parallel_jobs: 3": "max_parallel_jobs: 2"})
    result = runner.invoke(cli, ["tune", tuning, "--job-name", "cli-fails"])
    assert result.exit_code == 1, result.output
    assert "cli-fails Failed: No training job succeeded after 2 attempts." in result.stderr


@pytest.mark.parametrize("replace, message", [
    ({"  strategy: Random\n": "  stratgy: Random\n"}, r"key in tuning='stratgy': unknown name; did you mean 'strategy'"),
    ({"width: {min_value: 8, max_value: 64}": "width: {min: 8, max_value: 64}"},
     r"key in tuning.hyperparameter_ranges.width='min': unknown name; did you mean 'min_value'"),
    ({"width: {min_value: 8, max_value: 64}": "width: {max_value: 64}"},
     r"tuning.hyperparameter_ranges.width=\{'max_value': 64.0\}: give min_value and max_value"),
    ({"  strategy: Random\n": "  strategy: Bayesain\n"}, r"strategy='Bayesain': unknown name; did you mean 'Bayesian'"),
    ({"max_value: 0.1,": "max_value: 0.00001,"}, r"hyperparameter_ranges\['lr'\]=\(0.0001, 1e-05\): min_value is greater"),
    ({"tuning:\n": "tunning:\n"}, r"tuning=None: a tuning file is a job file with a `tuning:` mapping"),
])
def test_bad_tuning_files_are_refused_with_the_key_and_the_fix(runner, home, tmp_path, replace, message):
    import re

    result = runner.invoke(cli, ["tune", _file(tmp_path, **replace), "--dry-run"])
    assert result.exit_code == 2, result.output
    assert re.search(message, " ".join(result.output.split())), result.output
