"""The notice a local instance gets (stop, max_run, spot interruption): SIGTERM to its agent only, which
passes it on, so the entry point gets it once. A second one, sent to it directly besides, ran a script's
SIGTERM handler again in the middle of its save (tests/e2e/test_outcomes.py sees that end to end)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from shipyard.backends.local import Instance, InstancePlan
from shipyard.backends.sandbox import bwrap_problem
from shipyard.runtime.config import AgentConfig

# A stand-in for the agent and the entry point it starts: each notes every SIGTERM it gets. This agent
# passes nothing on, so whatever reaches the entry point came from Instance.terminate.
STUB = r"""
import signal, subprocess, sys, time
record, role = sys.argv[1], sys.argv[2]
def note(*_):
    with open(record, "a") as f:
        f.write(f"{role} got SIGTERM\n")
signal.signal(signal.SIGTERM, note)
if role == "agent":
    subprocess.Popen([sys.executable, __file__, record, "script"])
with open(record, "a") as f:
    f.write(f"{role} up\n")
time.sleep(60)
"""


@pytest.mark.parametrize("sandboxed", [True, False])
def test_terminate_signals_the_agent_only(tmp_path, sandboxed):
    if sandboxed and (problem := bwrap_problem()):
        pytest.skip(f"no sandbox here: {problem}")
    stub, record = tmp_path / "stub.py", tmp_path / "record"
    stub.write_text(STUB)
    argv = [sys.executable, str(stub), str(record), "agent"]
    if sandboxed:   # bubblewrap's own processes above the agent, as a sandboxed instance has them
        argv = ["bwrap", "--dev-bind", "/", "/", "--unshare-pid", "--die-with-parent", "--", *argv]
    config = AgentConfig(job_name="j", host="algo-1", hosts=("algo-1",), base=str(tmp_path), instance_dir=str(tmp_path),
                         log_path=str(tmp_path / "log"), events_path=str(tmp_path / "events"), num_cpus=1,
                         master_port=20000, host_addresses={"algo-1": "127.0.0.1"}, sandboxed=sandboxed,
                         hyperparameters={})
    plan = InstancePlan("algo-1", argv, config, tmp_path, None if sandboxed else "no sandbox in this test")
    instance = Instance(plan, subprocess.Popen(argv))
    try:
        _wait_for(record, ["agent up", "script up"])
        instance.terminate()
        time.sleep(1)   # time for a signal to arrive and be noted
        assert sorted(record.read_text().splitlines()) == ["agent got SIGTERM", "agent up", "script up"]
    finally:
        instance.kill()


def _wait_for(record: Path, lines: list[str]) -> None:
    deadline = time.monotonic() + 30
    while not (record.exists() and set(lines) <= set(record.read_text().splitlines())):
        assert time.monotonic() < deadline, record.read_text() if record.exists() else "nothing noted"
        time.sleep(0.05)
