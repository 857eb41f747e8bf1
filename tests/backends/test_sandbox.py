"""The instance sandbox as planned: the exact bwrap command line wrap() gives for an instance, in order
(bwrap mounts in argument order, each over the ones before), and the machine facts it is planned from.
Nothing here runs bwrap: tests/e2e/test_isolation.py looks from inside a job."""

from __future__ import annotations

import dataclasses

import os
import sys
from pathlib import Path

import pytest

import shipyard
from shipyard.backends import sandbox
from shipyard.backends.sandbox import Machine
from shipyard.runtime.config import AgentConfig, ChannelSource

JOB_DIR = Path("/srv/shipyard/jobs/j")
INSTANCE = JOB_DIR / "instances" / "algo-2"
AGENT = ["/env/bin/python", "-m", "shipyard.runtime.agent", str(INSTANCE / "agent.json")]
MACHINE = Machine(
    bwrap="/usr/bin/bwrap",
    opt=(("conda", None), ("tools", "/usr/local/tools")),
    private=(Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")),
    hidden=(Path("/root"), Path("/home"), Path("/srv/shipyard"), Path("/work/project")),
    python=(Path("/work/project/.venv"), Path("/work/project/.venv/lib/python3.11/site-packages"),
            Path("/usr/lib/python3.11"), Path("/home/u/.pyenv/versions/3.11.7"), Path("/work/project/src/pkg")),
)


def _config(**fields) -> AgentConfig:
    base = dict(job_name="j", host="algo-2", hosts=("algo-1", "algo-2"), base="/opt/ml",
                instance_dir=str(INSTANCE), log_path=str(JOB_DIR / "logs" / "algo-2.log"),
                events_path=str(JOB_DIR / "events" / "algo-2.jsonl"), num_cpus=1, master_port=20000,
                host_addresses={"algo-1": "127.0.1.1", "algo-2": "127.0.1.2"}, sandboxed=True,
                hyperparameters={"sagemaker_submit_directory": '"s3://bucket/j/source/sourcedir.tar.gz"'})
    return AgentConfig(**{**base, **fields})


def _wrap(config: AgentConfig, machine: Machine = MACHINE, job_dir: Path = JOB_DIR) -> list[str]:
    return sandbox.wrap(AGENT, config, job_dir=job_dir, hosts=INSTANCE / "hosts", machine=machine)


def _mounts(command: list[str]) -> list[tuple[str, ...]]:
    """The command's options, each with its arguments, up to `--`."""
    arity = {"--ro-bind": 2, "--dev-bind": 2, "--bind": 2, "--ro-bind-try": 2, "--symlink": 2, "--proc": 1,
             "--tmpfs": 1, "--unsetenv": 1, "--hostname": 1, "--bind-try": 2, "--setenv": 2}
    options, i = [], 1
    while command[i] != "--":
        n = arity.get(command[i], 0)
        options.append(tuple(command[i:i + 1 + n]))
        i += 1 + n
    return options


def test_an_instance_sees_a_read_only_system_its_own_temporary_dirs_and_nothing_of_users_or_other_jobs():
    command = _wrap(_config())
    assert command[0] == "/usr/bin/bwrap"
    assert command[command.index("--") + 1:] == AGENT
    assert _mounts(command) == [
        # 1. the system, read-only; devices (GPUs) and a /proc of its own
        ("--ro-bind", "/", "/"), ("--dev-bind", "/dev", "/dev"), ("--proc", "/proc"),
        # 2. /opt rebuilt around the instance's /opt/ml
        ("--tmpfs", "/opt"), ("--ro-bind", "/opt/conda", "/opt/conda"), ("--symlink", "/usr/local/tools", "/opt/tools"),
        ("--bind", str(INSTANCE / "ml"), "/opt/ml"),
        # 3. its own temporary directories
        ("--tmpfs", "/tmp"), ("--tmpfs", "/var/tmp"), ("--tmpfs", "/dev/shm"),
        # 4. hidden: homes, SHIPYARD_HOME (which holds the jobs directory), the project
        ("--tmpfs", "/home"), ("--tmpfs", "/root"), ("--tmpfs", "/srv/shipyard"), ("--tmpfs", "/work/project"),
        # 5. what of the Python environment those hid, read-only, each tree once
        ("--ro-bind-try", "/home/u/.pyenv/versions/3.11.7", "/home/u/.pyenv/versions/3.11.7"),
        ("--ro-bind-try", "/work/project/.venv", "/work/project/.venv"),
        ("--ro-bind-try", "/work/project/src/pkg", "/work/project/src/pkg"),
        # 6. the job's own directory, read-write
        ("--bind", str(JOB_DIR), str(JOB_DIR)),
        ("--ro-bind", str(INSTANCE / "hosts"), "/etc/hosts"),
        ("--unsetenv", "TMPDIR"),
        ("--unshare-uts",), ("--hostname", "algo-2"), ("--unshare-pid",), ("--die-with-parent",),
    ]


def test_local_inputs_are_bound_read_only_and_local_outputs_read_write_after_what_hides_them():
    config = _config(
        channels=(ChannelSource("train", "file:///work/project/data/train"), ChannelSource("test", "/data/test"),
                  ChannelSource("s3", "s3://bucket/train"), ChannelSource("inside", "/results/ckpt/train")),
        hyperparameters={"sagemaker_submit_directory": '"file:///srv/shipyard/output/j/source/sourcedir.tar.gz"'},
        checkpoint_uri="file:///results/ckpt",
        debugger={"LocalPath": "/opt/ml/output/tensors", "S3OutputPath": "file:///home/u/out/j/debug-output"},
        profiler={"uri": "s3://bucket/j/profiler-output"},
    )
    mounts = _mounts(_wrap(config))
    shown = [m for m in mounts if m[0] in ("--ro-bind-try", "--bind")]
    assert shown == [
        ("--bind", str(INSTANCE / "ml"), "/opt/ml"),
        ("--ro-bind-try", "/home/u/.pyenv/versions/3.11.7", "/home/u/.pyenv/versions/3.11.7"),
        # the code archive under SHIPYARD_HOME, a channel in the project; /data/test is visible anyway,
        # and a channel inside the checkpoint directory comes with it
        ("--ro-bind-try", "/srv/shipyard/output/j/source/sourcedir.tar.gz",
         "/srv/shipyard/output/j/source/sourcedir.tar.gz"),
        ("--ro-bind-try", "/work/project/.venv", "/work/project/.venv"),
        ("--ro-bind-try", "/work/project/data/train", "/work/project/data/train"),
        ("--ro-bind-try", "/work/project/src/pkg", "/work/project/src/pkg"),
        # outputs: writable wherever they are
        ("--bind", "/home/u/out/j/debug-output", "/home/u/out/j/debug-output"),
        ("--bind", "/results/ckpt", "/results/ckpt"),
        ("--bind", str(JOB_DIR), str(JOB_DIR)),
    ]
    hidden = max(i for i, m in enumerate(mounts) if m[0] == "--tmpfs")
    assert all(mounts.index(m) > hidden for m in shown[1:])


def test_container_paths_outside_opt_ml_are_this_machines_and_writable():
    config = _config(checkpoint_local_path="/scratch/ckpt",
                     debugger={"LocalPath": "/scratch/tensors", "S3OutputPath": "s3://b/j/debug-output"})
    writable = [m[1] for m in _mounts(_wrap(config)) if m[0] == "--bind"]
    assert writable == [str(INSTANCE / "ml"), "/scratch/ckpt", "/scratch/tensors", str(JOB_DIR)]
    assert "/opt/ml/checkpoints" not in _wrap(_config())  # the default is the instance's own


def test_the_directory_of_other_jobs_is_hidden_wherever_it_is():
    """On a Ray node the job directories are not under SHIPYARD_HOME; in /tmp they are hidden already."""
    node_job = Path("/data/nodes/j-1234")
    config = _config(instance_dir=str(node_job / "instances" / "algo-2"))
    mounts = _mounts(_wrap(config, job_dir=node_job))
    assert ("--tmpfs", "/data/nodes") in mounts
    assert mounts.index(("--tmpfs", "/data/nodes")) < mounts.index(("--bind", str(node_job), str(node_job)))
    tmp_job = Path("/tmp/shipyard-ray/j-1234")
    config = _config(instance_dir=str(tmp_job / "instances" / "algo-2"))
    tmpfs = [m[1] for m in _mounts(_wrap(config, job_dir=tmp_job)) if m[0] == "--tmpfs"]
    assert tmpfs == ["/opt", "/tmp", "/var/tmp", "/dev/shm", "/home", "/root", "/srv/shipyard", "/work/project"]


def test_paths_are_bound_where_they_really_are_and_where_the_agent_names_them_when_hidden(tmp_path):
    """A symlinked home (its venv on another disk) hides the link with it: the venv is bound at the path
    the agent runs it by. A visible symlink into a hidden directory leads to the bind at the real path
    (a bind through it would fail). An output is bound writable at both."""
    home, disk = tmp_path / "home", tmp_path / "disk"
    (disk / "venv").mkdir(parents=True)
    (home / "env").mkdir(parents=True)
    (home / "venv").symlink_to(disk / "venv")
    (tmp_path / "visible-env").symlink_to(home / "env")
    (home / "ckpt").symlink_to(disk / "ckpt")
    machine = Machine(bwrap="bwrap", opt=(), private=(), hidden=(home,),
                      python=(home / "venv", tmp_path / "visible-env"))
    config = _config(checkpoint_uri=f"file://{home / 'ckpt'}")
    shown = [m for m in _mounts(_wrap(config, machine)) if m[0] in ("--ro-bind-try", "--bind")][1:]
    assert shown == [("--ro-bind-try", str(home / "env"), str(home / "env")),
                     ("--ro-bind-try", str(home / "venv"), str(home / "venv")),
                     ("--bind", str(JOB_DIR), str(JOB_DIR)),
                     ("--bind", str(disk / "ckpt"), str(disk / "ckpt")),
                     ("--bind", str(home / "ckpt"), str(home / "ckpt"))]


def test_make_writable_creates_what_the_sandbox_binds_read_write(tmp_path):
    job_dir = tmp_path / "jobs" / "j"
    config = _config(instance_dir=str(job_dir / "instances" / "algo-2"), checkpoint_uri=f"file://{tmp_path}/ckpt",
                     profiler={"uri": f"{tmp_path}/out/j/profiler-output"})
    sandbox.make_writable(config, job_dir)
    assert (tmp_path / "ckpt").is_dir() and (tmp_path / "out" / "j" / "profiler-output").is_dir()
    assert job_dir.is_dir()


def test_machine_hides_homes_shipyard_home_and_the_directory_jobs_are_planned_from(tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("SHIPYARD_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    found = sandbox.machine()
    assert project.resolve() in found.hidden and (tmp_path / "home").resolve() in found.hidden
    assert {p.resolve() for p in sandbox.HOME_DIRS if p.is_dir()} <= set(found.hidden)
    assert set(found.private) == {p.resolve() for p in sandbox.PRIVATE_DIRS if p.is_dir()}
    # The agent's interpreter, this package however it is installed, and nothing of the planning
    # process's own sys.path (pytest's rootdir entries, the working directory).
    assert Path(sys.prefix) in found.python and Path(sys.base_prefix) in found.python
    assert Path(shipyard.__file__).parent in found.python
    assert project.resolve() not in found.python and Path(__file__).parent.resolve() not in found.python


@pytest.mark.parametrize("cwd", ["/", "/usr/lib"])
def test_a_working_directory_of_the_system_stays_visible(cwd, monkeypatch):
    monkeypatch.chdir(cwd)
    assert Path(os.path.realpath(cwd)) not in sandbox.machine().hidden


def test_compiled_torch_extensions_are_kept_across_jobs(tmp_path, monkeypatch):
    """Every instance's home is empty: DeepSpeed would build its ops again in every job (~100 s)."""
    cache = Path("/home/u/.cache/shipyard/torch_extensions")
    options = _mounts(_wrap(_config(), machine=dataclasses.replace(MACHINE, extensions=cache)))
    assert ("--bind-try", str(cache), str(cache)) in options
    assert ("--setenv", "TORCH_EXTENSIONS_DIR", str(cache)) in options
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    assert sandbox.extension_cache() == tmp_path / "cache" / "shipyard" / "torch_extensions"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "mine"))
    assert sandbox.extension_cache() == tmp_path / "mine"  # the user's choice stands
