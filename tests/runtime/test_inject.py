"""What the injected sitecustomize gives every process of a job: whole log lines and the heartbeat,
without hiding a sitecustomize the environment already had."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import shipyard.runtime

INJECT = Path(shipyard.runtime.__file__).parent / "inject"


def test_training_process_beats_and_other_sitecustomize_still_runs(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("print('other sitecustomize ran')\n")
    beats = tmp_path / "beats"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "missing"), str(INJECT), str(other)]),
           "SHIPYARD_HEARTBEAT_DIR": str(beats), "SHIPYARD_HEARTBEAT_INTERVAL": "0.1", "RANK": "3",
           "SM_CURRENT_HOST": "algo-2"}
    # Ends inside waiting(): a beat taken while the interpreter shuts down would show another place.
    script = ("import os, sys, time\ndef waiting():\n    time.sleep(1.0)\n    sys.stdout.flush(); os._exit(0)\n"
              "waiting()\n")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout == "other sitecustomize ran\n"
    (beat,) = [json.loads(p.read_text()) for p in beats.glob("*.json")]
    assert (beat["rank"], beat["host"], beat["collective"]) == (3, "algo-2", False)
    assert beat["where"] in ("<string>:3 in waiting", "<string>:4 in waiting")


def _last_beat_with_a_busy_child(tmp_path, main: str) -> dict:
    """The last heartbeat of a rank that starts a child using a core for 3 s (`child`), then does `main`."""
    beats = tmp_path / "beats"
    env = {**os.environ, "PYTHONPATH": str(INJECT), "SHIPYARD_HEARTBEAT_DIR": str(beats),
           "SHIPYARD_HEARTBEAT_INTERVAL": "0.5", "RANK": "0"}  # a loaded machine still gives the child 10 %
    busy = "import time\nend = time.time() + 3\nwhile time.time() < end: pass\n"
    script = (f"import os, subprocess, sys, time\nenv = dict(os.environ)\ndel env['RANK']  # the child does not beat\n"
              f"child = subprocess.Popen([sys.executable, '-c', {busy!r}], env=env)\n{main}\nos._exit(0)\n")
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)
    (beat,) = [json.loads(p.read_text()) for p in beats.glob("*.json")]
    return beat


def test_a_rank_waiting_for_a_busy_child_process_is_moving(tmp_path):
    """Its main thread sits at one line (subprocess's wait), yet the child's CPU is progress: a rank
    running `tar` while the others wait is not hung."""
    beat = _last_beat_with_a_busy_child(tmp_path, "child.wait()")
    assert beat["time"] - beat["progress_time"] < 1.0, beat  # >= 2.5 s (since the wait began) without it


def test_a_busy_child_does_not_hide_a_main_thread_stuck_elsewhere(tmp_path):
    beat = _last_beat_with_a_busy_child(tmp_path, "time.sleep(2.8)")
    assert beat["time"] - beat["progress_time"] > 1.5, beat


def test_a_ranks_first_optimizer_steps_are_counted_before_its_next_heartbeat(tmp_path):
    """The step hook is registered as torch.optim is imported, not at the next beat: a script whose first
    steps came before it (a fast machine's first 2 s) was said to hang at 'last optimizer step 0'."""
    env = {**os.environ, "PYTHONPATH": str(INJECT), "SHIPYARD_HEARTBEAT_DIR": str(tmp_path), "RANK": "0",
           "SHIPYARD_HEARTBEAT_INTERVAL": "600"}   # one beat, at the start: the next one never comes
    script = ("import torch\n"
              "from shipyard.runtime import heartbeat\n"
              "model = torch.nn.Linear(2, 1)\n"
              "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
              "for _ in range(3):\n    model(torch.ones(1, 2)).sum().backward()\n    optimizer.step()\n"
              "print('steps:', heartbeat._step_listeners[0].__self__.steps)\n")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "steps: 3" in done.stdout, done.stdout + done.stderr


def test_a_jobs_gloo_group_is_destroyed_at_exit(tmp_path):
    """A script that never calls destroy_process_group(): the group goes while the interpreter is whole."""
    env = {**os.environ, "PYTHONPATH": str(INJECT), "SHIPYARD_INSTANCE_DIR": str(tmp_path)}
    # The handler runs after the script's own atexit handlers (registered first): seen through the call.
    script = ("import torch.distributed as dist\n"
              "destroy = dist.destroy_process_group\n"
              "def seen(*args):\n    destroy(*args)\n    print('destroyed at exit:', not dist.is_initialized())\n"
              "dist.destroy_process_group = seen\n"
              "dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)\n")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "destroyed at exit: True" in done.stdout, done.stderr


# A gloo group made and destroyed, an unclosed file written, a handler of the script's, and an object
# whose __del__ only the interpreter's teardown would call: telling the clean exit from the normal one.
ENDING = """
import atexit, sys
import torch.distributed as dist
dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)
dist.destroy_process_group()
log = open(sys.argv[1], 'w')
log.write('written, never closed')
atexit.register(print, "the script's own handler ran")
class Teardown:
    def __del__(self):
        print('torn down', flush=True)
witness = Teardown()
"""


@pytest.mark.parametrize("ending, code, torn_down", [
    ("", 0, False),                                             # clean: os._exit(0), no teardown
    ("sys.exit(3)", 3, True),
    ("raise SystemExit('bad config')", 1, True),
    ("raise ValueError('broken')", 1, True),
    ("try:\n    sys.exit(2)\nexcept SystemExit:\n    pass", 0, True),  # a non-zero exit seen: the normal way
])
def test_a_process_that_made_a_gloo_group_ends_with_its_true_status(tmp_path, ending, code, torn_down):
    """Only a clean finish skips the interpreter's teardown (which can abort after a gloo group); its
    files are flushed and the script's atexit handlers have run. Every other ending keeps the status
    the interpreter gives it."""
    env = {**os.environ, "PYTHONPATH": str(INJECT), "SHIPYARD_INSTANCE_DIR": str(tmp_path)}
    out = tmp_path / "log.txt"
    done = subprocess.run([sys.executable, "-c", ENDING + ending, str(out)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == code, done.stderr
    assert ("torn down" in done.stdout) is torn_down
    assert "the script's own handler ran" in done.stdout and out.read_text() == "written, never closed"
    if "bad config" in ending:
        assert "bad config" in done.stderr


def test_a_clean_exit_finalizes_mpi_for_mpirun(tmp_path):
    """A rank that uses mpi4py and gloo and ends cleanly: os._exit would skip mpi4py's MPI_Finalize, and
    mpirun would fail the run ('exited without calling finalize')."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("OpenMPI's mpirun is not installed (make setup installs it)")
    env = {**os.environ, "PYTHONPATH": str(INJECT), "SHIPYARD_INSTANCE_DIR": str(tmp_path)}
    script = ("from mpi4py import MPI\nimport torch.distributed as dist\n"
              "dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)\n"
              "print('rank', MPI.COMM_WORLD.Get_rank(), flush=True)\n")
    done = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, "-c", script],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and sorted(done.stdout.split("\n")) == ["", "rank 0", "rank 1"], done.stdout + done.stderr
    assert "finalize" not in done.stderr.lower()


def test_processes_without_a_rank_do_not_beat(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(INJECT), "SHIPYARD_HEARTBEAT_DIR": str(tmp_path / "beats")}
    env.pop("RANK", None)
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True, timeout=60)
    assert not (tmp_path / "beats").exists()


def test_concurrent_processes_never_interleave_within_a_line(tmp_path):
    """Four processes printing into one O_APPEND log, as the ranks of an instance do."""
    log = tmp_path / "host.log"
    env = {**os.environ, "PYTHONPATH": str(INJECT), "PYTHONUNBUFFERED": "TRUE", "SHIPYARD_LINE_BUFFERED": "1"}
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        procs = [subprocess.Popen([sys.executable, "-c", f"for i in range(2000): print('line', i, 'of rank {r}')"],
                                  stdout=fd, stderr=fd, env=env) for r in range(4)]
        assert [p.wait(60) for p in procs] == [0, 0, 0, 0]
    finally:
        os.close(fd)
    lines = log.read_text().splitlines()
    for rank in range(4):
        assert [line for line in lines if line.endswith(f"of rank {rank}")] == [
            f"line {i} of rank {rank}" for i in range(2000)]
    assert len(lines) == 8000


def test_reading_a_restored_checkpoint_is_marked_writing_is_not(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "model.pt").write_text("weights")
    mark = tmp_path / "checkpoint-read"
    env = {**os.environ, "PYTHONPATH": str(INJECT), "SHIPYARD_CHECKPOINT_WATCH": str(checkpoints),
           "SHIPYARD_CHECKPOINT_READ_MARK": str(mark)}
    write = f"open({str(checkpoints / 'new.pt')!r}, 'w').write('x'); open({str(tmp_path / 'other')!r}, 'w')"
    subprocess.run([sys.executable, "-c", write], env=env, check=True, timeout=60)
    assert not mark.exists()
    read = f"import pathlib; pathlib.Path({str(checkpoints / 'model.pt')!r}).read_text()"
    subprocess.run([sys.executable, "-c", read], env=env, check=True, timeout=60)
    assert mark.exists()


def test_sagemaker_libraries_are_served_only_where_the_user_has_none(tmp_path):
    """A job's process imports SageMaker's libraries from shipyard; one the user installed wins."""
    from shipyard.runtime.served_libraries import LIBRARIES, SERVED

    user = tmp_path / "user"
    (user / "smdebug").mkdir(parents=True)
    (user / "smdebug" / "__init__.py").write_text("")
    script = ("import importlib, json, sys\n"
              f"print(json.dumps({{n: importlib.import_module(n).__file__ for n in {sorted(SERVED)!r}}}))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(INJECT), str(user)])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    files = json.loads(done.stdout.strip().splitlines()[-1])
    assert files.pop("smdebug") == str(user / "smdebug" / "__init__.py")
    assert files == {name: str(LIBRARIES / SERVED[name] / "__init__.py") for name in files}
    # outside a job nothing is served
    done = subprocess.run([sys.executable, "-c", "import smdistributed"], capture_output=True, text=True, timeout=60)
    assert "No module named 'smdistributed'" in done.stderr
