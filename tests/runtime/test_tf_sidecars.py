"""The agent watches a launcher's sidecars (TF's parameter server): one that dies while the script runs
fails the instance, naming it, instead of leaving the script blocked; one that fails to start leaks none."""

from __future__ import annotations

import os
import sys

import pytest

from shipyard.runtime import agent as agent_module
from shipyard.runtime import launchers
from shipyard.runtime.agent import Agent
from shipyard.runtime.config import AgentConfig
from shipyard.runtime.launchers.base import LaunchPlan


class _Launcher:
    name = "sidecar-test"

    def __init__(self, plan: LaunchPlan) -> None:
        self._plan = plan

    def plan(self, env, ctx) -> LaunchPlan:
        return self._plan


def _agent(tmp_path, monkeypatch, plan: LaunchPlan) -> Agent:
    base, instance = tmp_path / "ml", tmp_path / "instance"
    (base / "code").mkdir(parents=True)
    (base / "code" / "train.py").write_text("")  # code in place: nothing to fetch
    instance.mkdir()
    config = AgentConfig(
        job_name="sidecar-test", host="algo-1", hosts=("algo-1",), base=str(base), instance_dir=str(instance),
        log_path=str(tmp_path / "algo-1.log"), events_path=str(tmp_path / "events.jsonl"),
        hyperparameters={"sagemaker_program": '"train.py"'}, num_cpus=1, master_port=1,
        host_addresses={"algo-1": "127.0.0.1"}, sandboxed=False,
    )
    monkeypatch.setattr(launchers, "select", lambda env: _Launcher(plan))
    return Agent(config)


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.mark.slow
def test_a_sidecar_that_dies_fails_the_instance_naming_it(tmp_path, monkeypatch):
    script = tmp_path / "script.pid"
    plan = LaunchPlan(
        argv=_python(f"import os, time; open({str(script)!r}, 'w').write(str(os.getpid())); time.sleep(120)"),
        sidecars=[LaunchPlan(argv=_python("import sys; sys.exit('port taken')"), name="parameter server ps:0")],
    )
    agent = _agent(tmp_path, monkeypatch, plan)
    assert agent.run() == 1
    failure = agent.layout.failure_file.read_text()
    assert failure.startswith('ExecuteUserScriptError:\nExitCode 1\nErrorMessage "parameter server ps:0 exited '
                              'with code 1 while the entry point was running:\nport taken')
    assert agent.child.poll() is not None  # the blocked script was stopped, not left running
    with pytest.raises(ProcessLookupError):
        os.kill(int(script.read_text()), 0)


def test_a_sidecar_that_cannot_start_stops_the_ones_started(tmp_path, monkeypatch):
    plan = LaunchPlan(argv=_python("pass"), sidecars=[
        LaunchPlan(argv=_python("import time; time.sleep(120)"), name="first"),
        LaunchPlan(argv=[str(tmp_path / "missing")], name="second"),
    ])
    agent = _agent(tmp_path, monkeypatch, plan)
    stopped = []
    real_stop = agent._stop_sidecars
    monkeypatch.setattr(agent, "_stop_sidecars", lambda sidecars, wait: stopped.extend(sidecars) or real_stop(sidecars, wait))
    assert agent.run() == 1
    assert "FileNotFoundError" in agent.layout.failure_file.read_text()
    ((name, proc),) = stopped
    assert name == "first" and proc.poll() == -9


def test_a_sidecar_that_outstays_its_deadline_is_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(agent_module, "SIDECAR_STOP_SECONDS", 0.5)
    ignores_sigterm = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(120)"
    plan = LaunchPlan(argv=_python("import time; time.sleep(1)"), sidecars=[LaunchPlan(argv=_python(ignores_sigterm), name="stubborn")])
    agent = _agent(tmp_path, monkeypatch, plan)
    assert agent.run() == 0
    assert "stubborn still running 0s after SIGTERM; killing it" in (tmp_path / "algo-1.log").read_text()
