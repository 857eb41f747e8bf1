"""The `shipyard` command through click's CliRunner: help, errors, dry runs, the job commands on records
made directly in the store (nothing is started here)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest

from shipyard.cli.main import cli


def _job(home, name="demo-job", status=None):
    """A job record in the store, without a controller."""
    from shipyard.spec.job import JobSpec
    from shipyard.store import Store

    store = Store(home)
    spec = JobSpec(job_name=name, instance_count=1, output_path=f"file://{home}/output",
                   hyperparameters={"sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"x"'})
    store.create_job(spec)
    # A pid that is surely alive (ours), so reconcile() leaves InProgress jobs alone.
    import os

    import psutil

    store.update_job(name, controller_pid=os.getpid(), controller_started=psutil.Process().create_time())
    if status:
        store.update_job(name, training_start_time=1.0, training_end_time=2.0)
        store.transition(name, status, status)
    return store


def test_help_lists_every_command(runner):
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    for command in ("run", "jobs", "describe", "wait", "stop", "logs"):
        assert command in result.output
    jobs = runner.invoke(cli, ["jobs", "--help"]).output
    for command in ("list", "describe", "wait", "stop", "logs"):
        assert command in jobs
    assert "--hp" in runner.invoke(cli, ["run", "--help"]).output


def test_import_is_light():
    """`shipyard --help` must not pay for torch, pydantic or fsspec."""
    code = ("import sys, shipyard.cli.main; "
            "print(sorted(m for m in ('torch', 'pydantic', 'fsspec', 'rich', 's3fs', 'yaml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_unknown_job_is_exit_2_with_a_suggestion(runner, home):
    _job(home)
    for args in (["describe", "demo-jbo"], ["jobs", "describe", "demo-jbo"], ["wait", "demo-jbo"],
                 ["stop", "demo-jbo"], ["logs", "demo-jbo"]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 2, args
        assert "error: no job named 'demo-jbo'; did you mean 'demo-job'?" in result.stderr
        assert "Traceback" not in result.output


def test_validation_errors_are_exit_2_without_traceback(runner, home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(cli, ["run", "missing.py"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: entry_point='missing.py': no such file")
    assert result.exception is None or isinstance(result.exception, SystemExit)
    (tmp_path / "job.yaml").write_text("entry_point: train.py\ninstance_cout: 2\n")
    result = runner.invoke(cli, ["run", "job.yaml", "--dry-run"])
    assert result.exit_code == 2 and "did you mean 'instance_count'?" in result.stderr


def test_warnings_print_as_warning(runner, home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('x')\n")
    (tmp_path / "job.yaml").write_text("entry_point: train.py\nvolume_kms_key: my-key\n")
    result = runner.invoke(cli, ["run", "job.yaml", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    assert "warning: shipyard ignores 'volume_kms_key'" in result.stderr
    json.loads(result.stdout)


def test_dry_run_says_the_expected_cost(runner, home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    home.mkdir(parents=True, exist_ok=True)
    (home / "instance_types.yaml").write_text("ml.test.priced:\n  vcpus: 1\n  memory_gib: 1\n  gpus: 0\n"
                                              "  on_demand_usd_per_hour: 3.6\n  spot_usd_per_hour: 1.08\n")
    (tmp_path / "train.py").write_text("print('x')\n")
    args = ["run", "train.py", "--instance-type", "ml.test.priced", "--instance-count", "2", "--max-run", "3600",
            "--max-cost", "1.5", "--dry-run"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert ("expected cost: $7.2000 per hour (2 x ml.test.priced, on demand); at most $7.20 in max_run (60 min); "
            "max_cost $1.50 buys 12 min, then the job is stopped") in result.stdout
    assert json.loads(runner.invoke(cli, [*args, "--json"]).stdout)["expected_cost"].startswith("expected cost: $7.2")


def test_dry_run_json_for_two_torch_distributed_instances(runner, home, tmp_path, monkeypatch):
    from shipyard.backends.sandbox import bwrap_problem

    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('hello')\n")
    (tmp_path / "data").mkdir()
    result = runner.invoke(cli, [
        "run", "train.py", "--source-dir", "src", "--instance-count", "2", "--instance-type", "local",
        "--distribution", "torch_distributed", "--processes-per-host", "2", "--hp", "epochs=3",
        "--hp", "lr=0.01", "--hp", "note=a b;$(x)", "--channel", "train=data", "--sharded", "train",
        "--env", "FOO=1", "--job-name", "dry-1", "--dry-run", "--json",
    ])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["job_name"] == "dry-1"
    instances = plan["instances"]
    assert [i["host"] for i in instances] == ["algo-1", "algo-2"]
    ranks = []
    for item in instances:
        argv, env = item["entry_point_command"], item["environment"]
        assert item["launcher"] == "torch_distributed"
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--nproc_per_node") + 1] == "2"
        ranks.append(argv[argv.index("--node_rank") + 1])
        assert json.loads(env["SM_HOSTS"]) == ["algo-1", "algo-2"]
        assert env["SM_CURRENT_HOST"] == item["host"]
        assert json.loads(env["SM_HPS"]) == {"epochs": 3, "lr": 0.01, "note": "a b;$(x)"}
        assert env["FOO"] == "1" and list(env) == sorted(env)
        assert json.loads(env["SM_INPUT_DATA_CONFIG"])["train"]["S3DistributionType"] == "ShardedByS3Key"
        command = item["command"]
        assert command[-3:-1] == ["-m", "shipyard.runtime.agent"]
        if shutil.which("bwrap") and bwrap_problem() is None:
            assert command[0] == shutil.which("bwrap") and "--hostname" in command
            assert command[command.index("--hostname") + 1] == item["host"]
        else:
            assert command[0] == sys.executable and item["sandbox_problem"]
    assert ranks == ["0", "1"]
    assert not (home / "jobs" / "dry-1").exists()  # a dry run starts and writes nothing


def test_dry_run_human_output(runner, home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hello')\n")
    result = runner.invoke(cli, ["run", "train.py", "--framework", "none", "--job-name", "dry-2", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "job dry-2: 1 instance(s)" in result.stdout
    assert "entry point: " in result.stdout and "SM_CURRENT_HOST=algo-1" in result.stdout
    assert runner.invoke(cli, ["run", "train.py", "--json"]).exit_code == 2  # --json needs --dry-run


def test_list_shows_each_waiting_job_s_place_in_the_queue(runner, home):
    from shipyard.store.queue import CapacityQueue

    for name in ("holder", "second", "third"):
        queue = CapacityQueue(_job(home, name))
        queue.enqueue(name, 2, 0)
    queue.admit("holder", 2, ())
    rows = {line.split()[0]: line for line in runner.invoke(cli, ["jobs", "list"]).stdout.splitlines()[1:]}
    assert "Starting (1st in queue)" in rows["second"] and "Starting (2nd in queue)" in rows["third"]
    assert "queue" not in rows["holder"]


def test_list_describe_and_stop_on_store_records(runner, home):
    store = _job(home, "done-1", status="Completed")
    _job(home, "running-1")
    table = runner.invoke(cli, ["jobs", "list"])
    assert table.exit_code == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "SECONDARY", "STATUS", "INSTANCES", "STRATEGY", "CREATED",
                                "DURATION", "COST"]
    assert lines[1].split()[:3] == ["running-1", "InProgress", "Starting"]
    assert lines[2].split()[:3] == ["done-1", "Completed", "Completed"]
    only = runner.invoke(cli, ["jobs", "list", "--status", "completed"]).stdout
    assert "done-1" in only and "running-1" not in only
    assert "no jobs with status Failed" in runner.invoke(cli, ["jobs", "list", "--status", "Failed"]).stdout

    described = json.loads(runner.invoke(cli, ["describe", "done-1"]).stdout)
    assert described["TrainingJobStatus"] == "Completed"
    assert described["CreationTime"].endswith("+00:00")  # ISO datetimes
    assert described["TrainingStartTime"] == "1970-01-01T00:00:01+00:00"

    result = runner.invoke(cli, ["stop", "done-1"])
    assert result.exit_code == 2 and "already ended Completed" in result.stderr
    result = runner.invoke(cli, ["jobs", "stop", "running-1"])
    assert result.exit_code == 0 and store.stop_requested("running-1")


def test_logs_prefix_every_line_with_its_host(runner, home):
    store = _job(home, "logs-1", status="Completed")
    path = store.log_path("logs-1", "algo-1")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("first\n[bold]not markup[/bold] :thumbs_up:\n")
    for args in (["logs", "logs-1"], ["jobs", "logs", "logs-1", "--follow"]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 0
        assert result.stdout.splitlines()[:2] == ["algo-1 | first", "algo-1 | [bold]not markup[/bold] :thumbs_up:"]


def test_logs_of_one_host_from_its_last_lines(runner, home):
    from shipyard.spec.job import JobSpec
    from shipyard.store import Store

    store = Store(home)
    store.create_job(JobSpec(job_name="logs-2", instance_count=2, output_path=f"file://{home}/output",
                             hyperparameters={"sagemaker_program": '"train.py"'}))
    for host in ("algo-1", "algo-2"):
        path = store.log_path("logs-2", host)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{host} line {i}\n" for i in range(100)) + "half a line")
    result = runner.invoke(cli, ["logs", "logs-2", "--host", "algo-2", "--tail", "3"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [f"algo-2 | algo-2 line {i}" for i in (97, 98, 99)] + ["algo-2 | half a line"]
    both = runner.invoke(cli, ["logs", "logs-2", "--tail", "1"]).stdout.splitlines()
    assert both == ["algo-1 | algo-1 line 99", "algo-1 | half a line", "algo-2 | algo-2 line 99", "algo-2 | half a line"]
    wrong = runner.invoke(cli, ["logs", "logs-2", "--host", "algo-3"])
    assert wrong.exit_code == 2 and "--host='algo-3': unknown name; did you mean 'algo-2'" in wrong.stderr


def test_every_listing_prints_json_rows(runner, home):
    _job(home, "json-1", status="Completed")
    for args in (["pools", "list", "--all"], ["costs"], ["tuning", "list"], ["jobs", "list"]):
        for spelling in (["-o", "json"], ["--output", "json"], ["--json"]):
            result = runner.invoke(cli, [*args, *spelling])
            assert result.exit_code == 0, (args, result.output)
            json.loads(result.stdout)
    assert json.loads(runner.invoke(cli, ["costs", "-o", "json"]).stdout)["rows"][0]["jobs"] == 1
    assert json.loads(runner.invoke(cli, ["tuning", "list", "-o", "json"]).stdout) == []


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_commands_and_job_names(home, tmp_path):
    """The script `shipyard completion bash` prints, sourced in a real bash, completes job names from the
    store (the shipyard on PATH is this checkout's)."""
    _job(home, "quick-1")
    _job(home, "quick-2")
    _job(home, "other-1")
    script = subprocess.run([sys.executable, "-m", "shipyard.cli.main", "completion", "bash"], capture_output=True,
                            text=True, check=True).stdout
    (tmp_path / "bin").mkdir()
    shim = tmp_path / "bin" / "shipyard"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m shipyard.cli.main \"$@\"\n")
    shim.chmod(0o755)

    def complete(*words: str) -> list[str]:
        program = (script + "\nCOMP_WORDS=(" + " ".join(words) + "); COMP_CWORD=" + str(len(words) - 1)
                   + "\n_shipyard_completion shipyard\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
        done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60,
                              env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "SHIPYARD_HOME": str(home),
                                   "HOME": str(tmp_path)})
        assert done.returncode == 0, done.stderr
        return sorted(done.stdout.split())

    assert complete("shipyard", "jobs", "describe", "quick") == ["quick-1", "quick-2"]
    assert complete("shipyard", "logs", "oth") == ["other-1"]
    assert "describe" in complete("shipyard", "jobs", "de")


def test_delete_and_prune_remove_local_data_and_output_only_when_asked(runner, home):
    import sqlite3

    store = _job(home, "keep-output", status="Completed")
    for name in ("drop-output", "old-failed", "old-done"):
        _job(home, name, status="Failed" if "failed" in name else "Completed")
    _job(home, "running-2")
    for name in ("keep-output", "drop-output"):
        (home / "output" / name / "output").mkdir(parents=True)
        (home / "output" / name / "output" / "model.tar.gz").write_text("m")
        store.job_dir(name).mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(store.path) as db:  # the old ones ended ten days ago, the others just now
        db.execute("UPDATE jobs SET training_end_time=? - CASE WHEN name LIKE 'old-%' THEN 864000 ELSE 0 END",
                   (time.time(),))

    result = runner.invoke(cli, ["jobs", "delete", "keep-output"])
    assert result.exit_code == 0 and result.output == "deleted keep-output\n"
    assert not store.exists("keep-output") and not store.job_dir("keep-output").exists()
    assert (home / "output" / "keep-output" / "output" / "model.tar.gz").exists()   # storage: not asked
    result = runner.invoke(cli, ["jobs", "delete", "drop-output", "--delete-output"])
    assert result.exit_code == 0 and not (home / "output" / "drop-output").exists()
    refused = runner.invoke(cli, ["jobs", "delete", "running-2"])
    assert refused.exit_code == 2 and "has not ended" in refused.stderr and store.exists("running-2")

    listed = runner.invoke(cli, ["jobs", "prune", "--before", "7d", "--dry-run"])
    assert listed.exit_code == 0 and sorted(listed.output.split()) == ["old-done", "old-failed"]
    assert store.exists("old-done")
    declined = runner.invoke(cli, ["jobs", "prune", "--before", "7d"], input="n\n")
    assert declined.exit_code == 1 and store.exists("old-done")
    pruned = runner.invoke(cli, ["jobs", "prune", "--before", "7d", "--status", "failed", "--yes"])
    assert pruned.exit_code == 0 and pruned.output == "deleted old-failed\n"
    assert [r.name for r in store.list_jobs()] == ["running-2", "old-done"]
    assert runner.invoke(cli, ["jobs", "prune", "--before", "30d"]).output == "no jobs to prune\n"
    assert runner.invoke(cli, ["jobs", "prune", "--before", "1d", "--yes"]).output == "deleted old-done\n"


def test_wait_exit_codes(runner, home):
    _job(home, "ok-1", status="Completed")
    _job(home, "failed-1", status="Failed")
    result = runner.invoke(cli, ["wait", "ok-1"])
    assert result.exit_code == 0 and "Completed" in result.stdout
    result = runner.invoke(cli, ["jobs", "wait", "failed-1"])
    assert result.exit_code == 1 and "Failed" in result.stdout


def test_list_filters_by_name_and_age_prints_json_and_never_cuts_a_name(runner, home, monkeypatch):
    import sqlite3

    from rich.console import Console

    long = "a-rather-long-job-name-as-generated-2026-11-24-13-10-55-123"
    store = _job(home, long, status="Completed")
    _job(home, "old-1", status="Failed")
    with sqlite3.connect(store.path) as db:   # made ten days ago
        db.execute("UPDATE jobs SET creation_time=creation_time-864000 WHERE name='old-1'")
    rows = json.loads(runner.invoke(cli, ["jobs", "list", "-o", "json"]).stdout)
    assert [r["name"] for r in rows] == [long, "old-1"]
    assert (rows[0]["instance_type"], rows[0]["strategy"], rows[0]["cost"], rows[0]["queue_place"]) == \
        ("1 x local", "single", 0.0, None)
    recent = json.loads(runner.invoke(cli, ["jobs", "list", "--since", "7d", "--output", "json"]).stdout)
    assert [r["name"] for r in recent] == [long]
    named = json.loads(runner.invoke(cli, ["jobs", "list", "--name-contains", "old", "-o", "json"]).stdout)
    assert [r["name"] for r in named] == ["old-1"]
    assert "no jobs matching" in runner.invoke(cli, ["jobs", "list", "--name-contains", "nothing"]).stdout
    # An 80-column terminal: names whole, the less needed columns left out so that the rest fits.
    monkeypatch.setattr("shipyard.cli.main.table_console", lambda: Console(width=80, highlight=False))
    lines = runner.invoke(cli, ["jobs", "list"]).stdout.splitlines()
    assert lines[0].split()[:2] == ["NAME", "STATUS"] and "CREATED" not in lines[0]
    assert lines[1].split()[:2] == [long, "Completed"]
    assert max(len(line) for line in lines) <= 80


@pytest.mark.parametrize("status", ["bogus"])
def test_list_rejects_unknown_status(runner, home, status):
    result = runner.invoke(cli, ["jobs", "list", "--status", status])
    assert result.exit_code == 2 and "InProgress" in result.stderr
