"""A job this machine does not have, with a Ray cluster named: the read and stop commands run on the
cluster's home (control/cluster_home.py) as they were given. The home is a fake here; tests/e2e/
test_ray_backend.py and tests/e2e/hosts/test_ray_hosts.py run the real one."""

from __future__ import annotations

import pytest

from shipyard.cli.main import cli
from shipyard.control import cluster_home
from shipyard.errors import ShipyardError
from shipyard.sdk.job import ClusterTrainingJob
from shipyard.store import Store


@pytest.fixture
def far_home(monkeypatch):
    """A cluster home holding job `far` only; what it was asked to run, and what it answers."""
    ran = []

    def run(argv, stdout=None, stderr=None):
        ran.append(argv)
        print(f"ran {' '.join(argv)} there")
        return 3

    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    monkeypatch.setattr(cluster_home, "has_job", lambda name: name == "far")
    monkeypatch.setattr(cluster_home, "run", run)
    return ran


@pytest.mark.parametrize("command", [
    ["logs", "far", "--follow", "--host", "algo-2", "--host", "algo-1", "--tail", "5"],
    ["logs", "far"],
    ["describe", "far"],
    ["wait", "far", "--logs"],
    ["stop", "far"],
])
def test_a_job_on_the_cluster_runs_the_command_there_as_given(runner, home, far_home, command):
    result = runner.invoke(cli, command)
    assert far_home == [command]
    assert (result.exit_code, result.stdout) == (3, f"ran {' '.join(command)} there\n")


def test_the_short_flags_and_the_long_command_arrive_as_the_command_and_its_long_options(runner, home, far_home):
    runner.invoke(cli, ["jobs", "logs", "far", "-f"])
    assert far_home == [["logs", "far", "--follow"]]


def test_the_cluster_s_jobs_are_listed_there_and_only_when_a_cluster_is_named(runner, home, far_home, monkeypatch):
    result = runner.invoke(cli, ["jobs", "list", "--on-cluster", "--status", "failed", "-o", "json"])
    assert far_home == [["jobs", "list", "--status", "Failed", "--output", "json"]] and result.exit_code == 3
    monkeypatch.delenv("RAY_ADDRESS")
    result = runner.invoke(cli, ["jobs", "list", "--on-cluster"])
    assert result.exit_code == 2 and "--on-cluster lists a Ray cluster's jobs: name the cluster with RAY_ADDRESS" \
        in result.stderr
    assert len(far_home) == 1


def test_a_job_on_neither_is_not_found_here(runner, home, far_home):
    result = runner.invoke(cli, ["describe", "near"])
    assert far_home == [] and result.exit_code != 0 and "near" in result.stderr


def test_without_a_cluster_named_nothing_is_asked_of_one(runner, home, far_home, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS")
    monkeypatch.setattr(cluster_home, "has_job", lambda *_: pytest.fail("asked the cluster"))
    assert runner.invoke(cli, ["describe", "far"]).exit_code != 0


def test_what_a_cluster_job_cannot_change_from_here_is_refused_by_name():
    job = ClusterTrainingJob("far")
    for call, what in [(lambda: job.update(60), r"update\(keep_alive_period_in_seconds=...\)"),
                       (job.enable_default_profiling, r"enable_default_profiling\(\)"),
                       (job.disable_profiling, r"disable_profiling\(\)"),
                       (lambda: job.update_profiler(rules=[]), r"update_profiler\(\)")]:
        with pytest.raises(ShipyardError, match=f"^{what} is not available for job far, whose controller lives "
                                                "on the cluster"):
            call()


def test_a_cluster_that_does_not_answer_is_said_at_once_and_nothing_is_written(runner, home, tmp_path, monkeypatch):
    import socket

    with socket.socket() as s:   # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    monkeypatch.setenv("SHIPYARD_RAY_SHARED_STORAGE", "1")   # this machine's files pass for shared ones
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    result = runner.invoke(cli, ["run", "train.py", "--backend", "ray", "--controller", "cluster", "--detach"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: the Ray cluster at 127.0.0.1:{port} (RAY_ADDRESS) does not answer: ")
    assert not (home / "shipyard.db").exists() or not Store(home).list_jobs()
