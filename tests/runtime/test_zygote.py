"""The fork server (runtime/zygote.py) as the agent uses it: a process that imported things once
becomes `python SCRIPT ...` or `python -m MODULE ...` with the command's argv, environment, working
directory and standard streams, and reports its exit status like subprocess.Popen. Real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from shipyard.runtime import zygote

PY = sys.executable


@pytest.fixture
def server(tmp_path):
    """A zygote serving from tmp_path/z, with `json` imported before any request (what a fork inherits)."""
    directory = tmp_path / "z"
    directory.mkdir()
    code = ("import json, sys\nfrom shipyard.runtime import zygote\n"
            f"server = zygote.listen({str(directory)!r})\nprint('ready', flush=True)\nzygote.serve(server)\n")
    process = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    yield str(directory)
    process.kill()
    process.wait()


def _script(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_which_commands_a_fork_can_become():
    assert zygote.forkable([PY, "train.py", "--lr", "1"])
    assert zygote.forkable([PY, "-u", "-m", "torch.distributed.run", "train.py"])
    assert not zygote.forkable([PY, "-c", "print(1)"])           # options it does not reproduce
    assert not zygote.forkable([PY, "-X", "dev", "train.py"])
    assert not zygote.forkable(["/bin/sh", "train.sh"])          # not this interpreter
    assert not zygote.forkable([PY, "-m"])


def test_a_fork_becomes_the_command_with_its_own_state(server, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "helper.py").write_text("VALUE = 'from the job'\n")
    script = _script(work, "train.py", """
        import os, sys
        import helper
        print("argv", sys.argv)
        print("cwd", os.getcwd())
        print("env", os.environ.get("JOB_VAR"), os.environ.get("LEFT_OVER"))
        print("path0", sys.path[0])
        print("helper", helper.VALUE)
        print("json preloaded", "json" in sys.modules)
        print("main", __name__, os.path.basename(__file__))
        sys.exit(3)
    """)
    out = tmp_path / "out.txt"
    with open(out, "w") as stdout:
        process = zygote.ZygoteProcess([PY, "-u", script, "--lr", "0.1"], cwd=str(work), server=server,
                                       env={"JOB_VAR": "yes", "PATH": os.environ["PATH"]}, stdout=stdout,
                                       stderr=stdout)
        assert process.wait(timeout=30) == 3
    lines = out.read_text().splitlines()
    assert f"argv ['{script}', '--lr', '0.1']" in lines
    assert f"cwd {work}" in lines
    assert "env yes None" in lines            # the request's environment, nothing of the server's
    assert f"path0 {work}" in lines
    assert "helper from the job" in lines
    assert "json preloaded True" in lines     # what makes it warm
    assert "main __main__ train.py" in lines
    assert process.pid != os.getpid()


def test_a_module_runs_as_python_m(server, tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tool.py").write_text("import sys\nprint('module', __name__, sys.argv[1:])\n")
    out = tmp_path / "out.txt"
    with open(out, "w") as stdout:
        process = zygote.ZygoteProcess([PY, "-m", "pkg.tool", "a", "b"], cwd=str(tmp_path), server=server,
                                       env={}, stdout=stdout, stderr=stdout)
        assert process.wait(timeout=30) == 0
    assert "module __main__ ['a', 'b']" in out.read_text()


def test_an_uncaught_exception_exits_1_with_its_traceback(server, tmp_path):
    script = _script(tmp_path, "fail.py", "def f():\n    raise ValueError('broken input')\nf()\n")
    out = tmp_path / "out.txt"
    with open(out, "w") as stdout:
        assert zygote.ZygoteProcess([PY, script], cwd=str(tmp_path), env={}, server=server,
                                    stdout=stdout, stderr=stdout).wait(timeout=30) == 1
    text = out.read_text()
    assert "Traceback (most recent call last)" in text and "ValueError: broken input" in text


def test_signals_reach_the_fork_and_its_status_says_so(server, tmp_path):
    script = _script(tmp_path, "sleep.py", "import time\nprint('up', flush=True)\ntime.sleep(60)\n")
    out = tmp_path / "out.txt"
    with open(out, "w") as stdout:
        process = zygote.ZygoteProcess([PY, script], cwd=str(tmp_path), env={}, server=server, stdout=stdout,
                                       start_new_session=True)
        deadline = time.monotonic() + 30
        while "up" not in out.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.poll() is None
        assert os.getpgid(process.pid) == process.pid      # its own session: torchrun's killpg reaches it
        process.terminate()
        assert process.wait(timeout=30) == -signal.SIGTERM
    running = zygote.ZygoteProcess([PY, script], cwd=str(tmp_path), env={}, server=server,
                                   stdout=subprocess.DEVNULL)
    with pytest.raises(subprocess.TimeoutExpired):
        running.wait(timeout=0.2)
    running.kill()
    assert running.wait(timeout=30) == -signal.SIGKILL


def test_without_a_server_popen_executes(monkeypatch, tmp_path):
    monkeypatch.delenv(zygote.ENV_SOCKET, raising=False)
    process = zygote.popen([PY, "-c", "print(1)"], stdout=subprocess.DEVNULL)
    assert isinstance(process, subprocess.Popen) and process.wait() == 0


def test_a_job_bringing_its_own_copy_of_a_preloaded_package_is_seen(tmp_path):
    """The agent then executes the job's processes instead of forking a zygote holding the other copy."""
    site = tmp_path / "site-packages"
    (site / "json").mkdir(parents=True)
    (site / "requests_toolbelt").mkdir()
    code = tmp_path / "code"
    code.mkdir()
    (code / "zipfile.py").write_text("")
    (code / "train.py").write_text("")
    import json  # noqa: F401  (loaded here, as in a zygote)
    import zipfile  # noqa: F401

    assert zygote.shadowed([site, code, tmp_path / "missing"]) == {"json", "zipfile"}


def test_what_a_zygote_forgot_is_no_reason_to_start_cold(tmp_path, monkeypatch):
    """A warm instance's agent holds its storage client, the job's zygote does not (warm.py keep_only): a job
    bringing its own copy of one of those packages still forks from the zygote."""
    site = tmp_path / "site-packages"
    (site / "json").mkdir(parents=True)
    (site / "zipfile.py").write_text("")
    import json  # noqa: F401  (loaded here, in the agent)
    import zipfile  # noqa: F401

    monkeypatch.setattr(zygote, "HELD", frozenset({"zipfile", "os"}))
    assert zygote.shadowed([site]) == {"zipfile"}
