"""How jobs end: failures name the error and the host, stops and timeouts end Stopped with what the
script saved, every entry point type runs, and a dead controller leaves a true state. Scripts here
are plain Python (no torch) so each job takes seconds."""

from __future__ import annotations

import os
import signal
import tarfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from shipyard import Estimator
from shipyard.errors import UnexpectedStatusError
from shipyard.sdk.job import TrainingJob
from shipyard.store import Store

pytestmark = pytest.mark.slow


def _source(tmp_path: Path, files: dict[str, str]) -> Path:
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    for name, text in files.items():
        path = source / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return source


def _estimator(source: Path, entry: str = "train.py", **kwargs) -> Estimator:
    kwargs.setdefault("stop_grace_seconds", 5)
    return Estimator(entry_point=entry, source_dir=str(source), **kwargs)


def _model_files(job: TrainingJob) -> dict[str, bytes]:
    path = job.describe()["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://")
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_failure_names_the_error_and_the_host(home, tmp_path):
    source = _source(tmp_path, {"train.py": """
        import os, time
        if os.environ["SM_CURRENT_HOST"] == "algo-2":
            raise ValueError("bad data on purpose")
        time.sleep(120)
    """})
    est = _estimator(source, instance_count=2)
    started = time.monotonic()
    with pytest.raises(UnexpectedStatusError) as failure:
        est.fit(logs=False)
    assert time.monotonic() - started < 60  # the healthy instance was torn down, not waited for
    reason = failure.value.reason
    assert reason.startswith("AlgorithmError: algo-2: ExecuteUserScriptError")
    assert "ValueError: bad data on purpose" in reason
    description = est.latest_training_job.describe()
    assert description["TrainingJobStatus"] == "Failed"
    assert description["SecondaryStatus"] == "Failed"
    assert description["FailureReason"] == reason
    assert len(reason) <= 1024


def test_failure_names_the_cause_not_the_peer_whose_collective_broke(home, tmp_path):
    """algo-1 fails first, but only because a peer went away (gloo's words); algo-2, failing a moment
    later for a reason of its own, is the one named."""
    source = _source(tmp_path, {"train.py": """
        import os, time
        # Both scripts run before either fails (instances start apart); they meet in the job's directory,
        # the one place of this machine both instances' sandboxes share.
        ready = os.path.join(os.environ["SHIPYARD_INSTANCE_DIR"], "..", "..", "ready")
        if os.environ["SM_CURRENT_HOST"] == "algo-1":
            while not os.path.exists(ready):
                time.sleep(0.05)
            raise RuntimeError("[gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.1.2]:4321")
        open(ready, "w").close()
        time.sleep(0.8)
        raise MemoryError("the cause, on purpose")
    """})
    with pytest.raises(UnexpectedStatusError) as failure:
        _estimator(source, instance_count=2).fit(logs=False)
    reason = failure.value.reason
    assert reason.startswith("AlgorithmError: algo-2: ExecuteUserScriptError") and "the cause, on purpose" in reason

def test_syntax_error_fails_with_its_name(home, tmp_path):
    source = _source(tmp_path, {"train.py": "def broken(:\n"})
    with pytest.raises(UnexpectedStatusError, match="SyntaxError"):
        _estimator(source).fit(logs=False)


def test_failure_file_written_by_the_script_is_the_reason(home, tmp_path):
    source = _source(tmp_path, {"train.py": """
        import sys
        open("/opt/ml/output/failure", "w").write("DataError: column 'y' is missing")
        sys.exit(3)
    """})
    with pytest.raises(UnexpectedStatusError, match="algo-1: DataError: column 'y' is missing"):
        _estimator(source).fit(logs=False)


def test_max_run_ends_stopped_with_what_the_script_saved(home, tmp_path):
    """The script gets the stop's SIGTERM once: its handler, which takes a while, is not run again in the
    middle (a second SIGTERM to it, besides the one its agent passes on, would)."""
    source = _source(tmp_path, {"train.py": """
        import signal, sys, time
        def on_term(*_):
            with open("/opt/ml/model/notices.txt", "a") as f:
                f.write("notice\\n")
            time.sleep(1)   # saving
            open("/opt/ml/model/saved-on-sigterm.txt", "w").write("partial")
            sys.exit(0)
        signal.signal(signal.SIGTERM, on_term)
        print("training", flush=True)
        time.sleep(120)
    """})
    est = _estimator(source, max_run=3)
    with pytest.warns(UserWarning, match="MaxRuntimeExceeded"):
        est.fit(logs=False)
    description = est.latest_training_job.describe()
    assert (description["TrainingJobStatus"], description["SecondaryStatus"]) == ("Stopped", "MaxRuntimeExceeded")
    assert "Stopping" in [t["Status"] for t in description["SecondaryStatusTransitions"]]
    assert _model_files(est.latest_training_job) == {"saved-on-sigterm.txt": b"partial", "notices.txt": b"notice\n"}


def test_stop_kills_a_script_that_ignores_sigterm_after_the_grace(home, tmp_path, wait_for_line):
    source = _source(tmp_path, {"train.py": """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open("/opt/ml/model/early.txt", "w").write("kept")
        print("started", flush=True)
        time.sleep(300)
    """})
    est = _estimator(source, stop_grace_seconds=2)
    est.fit(wait=False)
    job = est.latest_training_job
    log = Path(os.environ["SHIPYARD_HOME"]) / "jobs" / job.name / "logs" / "algo-1.log"
    wait_for_line(log, "started")
    job.stop()
    with pytest.warns(UserWarning, match="stopped"):
        job.wait(logs=False)
    assert job.describe()["SecondaryStatus"] == "Stopped"
    assert _model_files(job) == {"early.txt": b"kept"}


@pytest.mark.parametrize("kind", ["shell", "package", "requirements"])
def test_entry_point_types(home, tmp_path, kind):
    if kind == "shell":
        files = {"train.sh": 'echo "args: $1|$2|$3|$4"\necho done > /opt/ml/model/out.txt\n'}
        entry, expected = "train.sh", "args: -n|1|--note|x y; ls"
    elif kind == "package":
        files = {
            "setup.py": "from setuptools import setup\nsetup(name='trainer', version='0.1', py_modules=['train'])\n",
            "train.py": "import sys\nprint('args:', sys.argv[1:])\nopen('/opt/ml/model/out.txt','w').write('done')\n",
        }
        # With setup.py the toolkit installs the package and runs the entry point as a module.
        entry, expected = "train.py", "-m train -n 1 --note x y; ls\nargs: ['-n', '1', '--note', 'x y; ls']"
    else:
        files = {
            "requirements.txt": "./vendor/tinylib\n",
            "vendor/tinylib/setup.py": "from setuptools import setup\nsetup(name='tinylib', version='1.0', py_modules=['tinylib'])\n",
            "vendor/tinylib/tinylib.py": "VALUE = 'from tinylib'\n",
            "train.py": "import tinylib\nprint('args:', tinylib.VALUE)\nopen('/opt/ml/model/out.txt','w').write('done')\n",
        }
        entry, expected = "train.py", "args: from tinylib"
    source = _source(tmp_path, files)
    est = _estimator(source, entry, hyperparameters={"note": "x y; ls", "n": 1})
    est.fit(logs=False)
    log = (Path(os.environ["SHIPYARD_HOME"]) / "jobs" / est.latest_training_job.name / "logs" / "algo-1.log").read_text()
    assert expected in log
    assert _model_files(est.latest_training_job) == {"out.txt": b"done\n" if kind == "shell" else b"done"}
    if kind == "requirements":  # installed for the job only, not into this environment
        with pytest.raises(ImportError):
            __import__("tinylib")


def _two_running_instances(tmp_path: Path, wait_for_line) -> tuple[TrainingJob, Path, psutil.Process]:
    """A 2-instance job whose scripts are up and sleeping: (job, algo-2's log, its controller)."""
    source = _source(tmp_path, {"train.py": "import time\nprint('up', flush=True)\ntime.sleep(300)\n"})
    est = _estimator(source, instance_count=2)
    est.fit(wait=False)
    job = est.latest_training_job
    store = Store()
    wait_for_line(store.log_path(job.name, "algo-1"), "up")  # both scripts run (instances start apart)
    log = store.log_path(job.name, "algo-2")
    wait_for_line(log, "up")
    return job, log, psutil.Process(store.get_job(job.name).controller_pid)


def test_killed_controller_leaves_a_true_state_and_no_orphans(home, tmp_path, wait_for_line):
    job, log, controller = _two_running_instances(tmp_path, wait_for_line)
    instances = controller.children(recursive=True)
    assert instances
    controller.send_signal(signal.SIGKILL)
    controller.wait(10)
    psutil.wait_procs(instances, timeout=20)
    assert not [p for p in instances if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    description = job.describe()
    assert description["TrainingJobStatus"] == "Failed"
    assert f"controller (pid {controller.pid}) stopped" in description["FailureReason"]
    assert [a["Outcome"] for a in description["Shipyard"]["Attempts"]] == ["Failed"]  # no retries asked for
    assert "up" in log.read_text()  # logs survive


def test_killed_controller_without_a_sandbox_leaves_no_script_running(home, tmp_path, monkeypatch, wait_for_line):
    """Without a sandbox nothing kills a script when its agent dies: the command that notices the dead
    controller does."""
    monkeypatch.setenv("SHIPYARD_SANDBOX", "off")
    job, log, controller = _two_running_instances(tmp_path, wait_for_line)
    scripts = [p for p in controller.children(recursive=True) if "train.py" in " ".join(p.cmdline())]
    assert len(scripts) == 2
    controller.send_signal(signal.SIGKILL)
    controller.wait(10)
    assert job.describe()["TrainingJobStatus"] == "Failed"
    gone, alive = psutil.wait_procs(scripts, timeout=10)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def test_without_a_sandbox_paths_point_at_the_instance_directory(home, tmp_path, monkeypatch):
    monkeypatch.setenv("SHIPYARD_SANDBOX", "off")
    source = _source(tmp_path, {"train.py": """
        import os
        model = os.environ["SM_MODEL_DIR"]
        assert not model.startswith("/opt/ml"), model
        open(os.path.join(model, "where.txt"), "w").write(model)
    """})
    est = _estimator(source, instance_count=2)
    est.fit(logs=False)
    files = _model_files(est.latest_training_job)
    assert set(files) == {"where.txt"}
    assert files["where.txt"].decode().endswith("/instances/algo-2/ml/model")  # the later host wins a clash
    assert any("without a sandbox" in w for w in est.latest_training_job.describe()["Shipyard"]["Warnings"])


def test_killed_agent_fails_the_job_naming_the_instance(home, tmp_path, wait_for_line):
    job, log, controller = _two_running_instances(tmp_path, wait_for_line)
    agents = [p for p in controller.children(recursive=True)
              if "shipyard.runtime.agent" in " ".join(p.cmdline()) and "algo-2" in " ".join(p.cmdline())
              and p.name() != "bwrap"]
    assert len(agents) == 1
    agents[0].kill()
    with pytest.raises(UnexpectedStatusError, match="algo-2: the instance exited with code"):
        job.wait(logs=False)
    assert "up" in log.read_text()
