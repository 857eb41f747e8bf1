"""The mpi launcher's exact plan per instance, its bad input, and the pieces between mpirun and the
workers (the orted command, the rendezvous, mpirun's output), without running MPI."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from shipyard import Estimator
from shipyard.backends import sandbox
from shipyard.backends.resources import MachineResources
from shipyard.contract import hyperparameters as hp
from shipyard.contract.config import resource_config
from shipyard.contract.environment import TrainingEnvironment
from shipyard.contract.layout import Layout
from shipyard.control.planning import plan_job
from shipyard.errors import ValidationError
from shipyard.runtime.launchers import LaunchContext, get
from shipyard.runtime.launchers.mpi import PER_INSTANCE_VARS
from shipyard.runtime.mpi.output import MpiOutput
from shipyard.runtime.mpi.rendezvous import Rendezvous
from shipyard.runtime.mpi.worker import Worker, orted_argv
from shipyard.spec.job import JobSpec
from tests.runtime.test_mpi_mailbox import serving

MACHINE = MachineResources(vcpus=8, memory_gib=32.0, gpus=())
PY = sys.executable
# What the toolkit exports with -x for a job with one hyperparameter and no channels (spec 2.6), in
# to_env_vars order, less the per-instance variables.
EXPORTED = [
    "SM_HOSTS", "SM_HPS", "SM_USER_ENTRY_POINT", "SM_FRAMEWORK_PARAMS",
    "SM_INPUT_DATA_CONFIG", "SM_OUTPUT_DATA_DIR", "SM_CHANNELS", "SM_INSTANCE_GROUPS", "SM_INSTANCE_GROUPS_DICT",
    "SM_DISTRIBUTION_INSTANCE_GROUPS", "SM_IS_HETERO", "SM_MODULE_NAME", "SM_LOG_LEVEL", "SM_FRAMEWORK_MODULE",
    "SM_INPUT_DIR", "SM_INPUT_CONFIG_DIR", "SM_OUTPUT_DIR", "SM_MODEL_DIR", "SM_MODULE_DIR", "SM_USER_ARGS",
    "SM_OUTPUT_INTERMEDIATE_DIR", "SM_HP_EPOCHS", "TRAINING_JOB_NAME",
]


@pytest.fixture
def sandboxed(monkeypatch):
    monkeypatch.delenv("SHIPYARD_SANDBOX", raising=False)
    if sandbox.bwrap_problem():
        pytest.skip(f"no sandbox here: {sandbox.bwrap_problem()}")


def _spec(count: int = 2, entry: str = "train.py", **mpi) -> JobSpec:
    return JobSpec(
        job_name="mpi-plan",
        hyperparameters={
            **hp.encode_json({"epochs": 3}),
            **hp.encode_json({"sagemaker_program": entry, "sagemaker_submit_directory": "file:///code/sourcedir.tar.gz",
                              "sagemaker_mpi_enabled": True, **mpi}),
        },
        instance_count=count,
        output_path="file:///out",
    )


def _mpirun(host_list: str, processes: str, nccl_debug: str = "INFO", custom: tuple[str, ...] = (),
            network: str = "lo") -> list[str]:
    argv = [
        "mpirun", "--host", host_list, "-np", processes, "--allow-run-as-root", "--display-map", "--tag-output",
        "-mca", "btl_tcp_if_include", network, "-mca", "oob_tcp_if_include", network,
        "-mca", "plm_rsh_no_tree_spawn", "1",
        "-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca", "btl", "self,vader,tcp",
        "-mca", "orte_abort_on_non_zero_status", "1", "-mca", "btl_vader_single_copy_mechanism", "none",
        "-mca", "plm_rsh_agent", f"{PY} -m shipyard.runtime.mpi.rsh",
        "-x", "NCCL_MIN_NRINGS=4", "-x", f"NCCL_DEBUG={nccl_debug}", "-x", "PATH",
        *custom,
    ]
    for name in EXPORTED:
        argv += ["-x", name]
    return argv


def test_leader_runs_mpirun_for_every_rank_and_workers_wait(tmp_path, sandboxed):
    spec = _spec(sagemaker_mpi_num_of_processes_per_host=2,
                 sagemaker_mpi_custom_mpi_options="--NCCL_DEBUG WARN -x 'GREETING=hello world' --mca foo bar")
    leader, worker = plan_job(spec, tmp_path, MACHINE, master_port=29500)
    assert [leader.launcher, worker.launcher] == ["mpi", "mpi"]
    assert leader.argv == [
        PY, "-m", "shipyard.runtime.mpi.leader",
        *_mpirun("algo-1:2,algo-2:2", "4", "WARN", ("-x", "GREETING=hello world", "--mca", "foo", "bar")),
        PY, "-m", "mpi4py", "train.py", "--epochs", "3",
    ]
    assert worker.argv == [PY, "-m", "shipyard.runtime.mpi.worker"]
    for launch, host in ((leader, "algo-1"), (worker, "algo-2")):
        env = launch.env
        assert env["MASTER_ADDR"] == "algo-1" and env["MASTER_PORT"] == "29500"
        assert env["SHIPYARD_MPI_MAILBOX_PORT"] == "29503"   # the last of the span's 4 ports
        assert env["NCCL_SOCKET_IFNAME"] == env["SM_NETWORK_INTERFACE_NAME"] == "lo"
        assert env["OMPI_ALLOW_RUN_AS_ROOT"] == env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
        assert env["SM_CURRENT_HOST"] == host
        assert env["SHIPYARD_INSTANCE_DIR"] == str(tmp_path / "instances" / host)
    # Exporting the leader's value of a variable must not change what a worker's rank sees.
    exported = leader.argv[leader.argv.index("PATH") + 1:]
    names = [exported[i + 1] for i, token in enumerate(exported) if token == "-x" and "=" not in exported[i + 1]]
    assert all(leader.env[name] == worker.env[name] for name in names)
    assert {"SM_CURRENT_HOST", "SM_TRAINING_ENV", "SM_RESOURCE_CONFIG", "CURRENT_HOST",
            "SM_NETWORK_INTERFACE_NAME"} <= PER_INSTANCE_VARS
    assert not PER_INSTANCE_VARS & set(names)


def test_one_process_per_host_lists_bare_hosts(tmp_path, sandboxed):
    leader, _, _ = plan_job(_spec(count=3), tmp_path, MACHINE, master_port=1)
    assert leader.argv[3:-6] == _mpirun("algo-1,algo-2,algo-3", "3")


@pytest.mark.parametrize(("entry", "setup_py", "program"), [
    ("train.py", False, [PY, "-m", "mpi4py", "train.py", "--epochs", "3"]),
    ("train.py", True, [PY, "-m", "mpi4py", "-m", "train", "--epochs", "3"]),
    ("run.sh", False, ["/bin/sh", "run.sh", "--epochs", "3"]),
])
def test_entry_point_types_follow_the_toolkit(tmp_path, entry, setup_py, program):
    layout = Layout(tmp_path / "ml")
    layout.code_dir.mkdir(parents=True)
    if setup_py:
        (layout.code_dir / "setup.py").write_text("")
    env = TrainingEnvironment(
        layout=layout, hyperparameters=_spec(count=1, entry=entry).hyperparameters,
        resource_config=resource_config("algo-1", ["algo-1"], "local", "lo"), input_data_config={},
        job_name="mpi-plan", num_gpus=0, num_cpus=2,
    )
    launcher = get("mpi")
    assert launcher.enabled(env)
    plan = launcher.plan(env, LaunchContext(master_port=1, host_addresses={"algo-1": "127.0.1.1"}, sandboxed=True))
    assert plan.argv[-len(program):] == program
    assert plan.argv[plan.argv.index("--host") + 1] == "algo-1"


def test_mpi_needs_the_sandbox(tmp_path, monkeypatch):
    monkeypatch.setenv("SHIPYARD_SANDBOX", "off")
    with pytest.raises(ValidationError, match="distribution.mpi.*bubblewrap"):
        plan_job(_spec(), tmp_path, MACHINE, master_port=1)


@pytest.mark.parametrize(("options", "field"), [
    ({"custom_mpi_options": "-x 'A=unbalanced"}, "distribution.mpi.custom_mpi_options"),
    ({"custom_mpi_options": ["-x", "A=1"]}, "distribution.mpi.custom_mpi_options"),
    ({"processes_per_host": 0}, "distribution.mpi.processes_per_host"),
    ({"processes_per_host": "2"}, "distribution.mpi.processes_per_host"),
])
def test_bad_mpi_options_fail_before_anything_runs(home, tmp_path, options, field):
    (tmp_path / "train.py").write_text("print('never runs')\n")
    with pytest.raises(ValidationError) as error:
        Estimator(entry_point=str(tmp_path / "train.py"), instance_count=2,
                  distribution={"mpi": {"enabled": True, **options}})
    assert error.value.field == field
    assert not home.exists()


# -- between mpirun and the workers ------------------------------------------------------------

# What OpenMPI 4.1 gives its remote agent (recorded from a real mpirun).
ORTED = [" orted", "--daemonize", "-mca", "ess", '"env"', "-mca", "ess_base_jobid", '"2699296768"',
         "-mca", "orte_hnp_uri", '"2699296768.0;tcp://127.0.0.1:43555"',
         "-mca", "plm_rsh_agent", f'"{PY} -m shipyard.runtime.mpi.rsh"', "-mca", "pmix", '"^s1,s2,cray,isolated"']


def test_orted_command_is_split_like_a_shell_would_without_one():
    assert orted_argv(ORTED) == [
        "orted", "-mca", "ess", "env", "-mca", "ess_base_jobid", "2699296768",
        "-mca", "orte_hnp_uri", "2699296768.0;tcp://127.0.0.1:43555",
        "-mca", "plm_rsh_agent", f"{PY} -m shipyard.runtime.mpi.rsh", "-mca", "pmix", "^s1,s2,cray,isolated",
    ]
    with pytest.raises(ValueError, match="without a shell"):
        orted_argv(["PATH=/x:$PATH", ";", "export", "PATH", ";", "orted"])


def test_worker_runs_requests_reports_exits_and_cancels(tmp_path):
    rendezvous = Rendezvous(tmp_path / "mpi" / "1234")
    with serving(rendezvous, ["algo-2", "algo-3"]) as client:
        _worker_runs_requests_reports_exits_and_cancels(rendezvous, Worker(client, "algo-2"))


def _worker_runs_requests_reports_exits_and_cancels(rendezvous: Rendezvous, worker: Worker) -> None:
    done = rendezvous.request("algo-2", [sys.executable, "-c", "'import sys; sys.exit(3)'"])
    stuck = rendezvous.request("algo-2", [sys.executable, "-c", "'import time; time.sleep(60)'"])
    rendezvous.request("algo-3", ["false"])  # another host's: not this worker's business
    deadline = time.monotonic() + 30
    while rendezvous.exit_code("algo-2", done) is None and time.monotonic() < deadline:
        worker.start_requested()
        worker.reap()
        time.sleep(0.05)
    assert rendezvous.exit_code("algo-2", done) == 3
    assert len(worker.running) == 1
    rendezvous.cancel("algo-2", stuck)
    while rendezvous.exit_code("algo-2", stuck) is None and time.monotonic() < deadline:
        worker.reap()
        time.sleep(0.05)
    assert rendezvous.exit_code("algo-2", stuck) == 143
    rendezvous.finish(1)
    assert worker.run() == 0  # the leader's exit code is the job's; workers end cleanly


def test_rendezvous_is_per_job_and_attempt_port():
    rendezvous = Rendezvous.from_environment({"SHIPYARD_INSTANCE_DIR": "/h/jobs/j/instances/algo-2-2",
                                              "MASTER_PORT": "4242"})
    assert rendezvous.root == Path("/h/jobs/j/mpi/4242")


MAP = """ Data for JOB [41187,1] offset 0 Total slots allocated 4
 ========================   JOB MAP   ========================
 Data for node: algo-1\tNum slots: 2\tMax slots: 0\tNum procs: 2
 \tProcess OMPI jobid: [41187,1] App: 0 Process rank: 0 Bound: N/A
 \tProcess OMPI jobid: [41187,1] App: 0 Process rank: 1 Bound: N/A
 Data for node: algo-2\tNum slots: 2\tMax slots: 0\tNum procs: 2
 \tProcess OMPI jobid: [41187,1] App: 0 Process rank: 2 Bound: N/A
 \tProcess OMPI jobid: [41187,1] App: 0 Process rank: 3 Bound: N/A"""


def _fed(text: str) -> tuple[MpiOutput, list[str]]:
    output = MpiOutput()
    return output, [output.feed(line) for line in text.splitlines()]


def test_output_tags_name_the_host_like_the_toolkit():
    output, lines = _fed(MAP + "\n[1,3]<stdout>:hello\n[1,1]<stderr>:a[1,1]<stderr>:b\n[1,9]<stdout>:unmapped"
                         "\nmpirun: [1,2]<stdout>: is not a tag here")
    # Only mpirun's tag at the start of a line; what the rank printed stays as it printed it.
    assert lines[-4:] == ["[1,mpirank:3,algo-2]<stdout>:hello", "[1,mpirank:1,algo-1]<stderr>:a[1,1]<stderr>:b",
                          "[1,9]<stdout>:unmapped", "mpirun: [1,2]<stdout>: is not a tag here"]
    assert list(output.lines[1]) == ["a[1,1]<stderr>:b"]
    assert output.failure(1, ["mpirun"]) is None  # no rank to blame: mpirun's own output says why


@pytest.mark.parametrize("notice", [
    "MPI_ABORT was invoked on rank 2 in communicator MPI_COMM_WORLD",
    "  Process name: [[41187,1],2]",
    "mpirun noticed that process rank 2 with PID 0 on node algo-2 exited on signal 9 (Killed).",
])
def test_failure_names_the_rank_mpirun_names_and_its_host(notice):
    output, _ = _fed(MAP + "\n[1,0]<stderr>:Traceback (most recent call last):\n[1,0]<stderr>:RuntimeError: peer gone"
                     "\n[1,2]<stdout>:step 1\n[1,2]<stderr>:Traceback (most recent call last):"
                     "\n[1,2]<stderr>:  File \"train.py\", line 3\n[1,2]<stderr>:ValueError: bad shard\n" + notice)
    message = output.failure(1, ["mpirun", "-np", "4"])
    assert message == ('ExecuteUserScriptError:\nExitCode 1\nErrorMessage "MPI rank 2 on algo-2 failed first:\n'
                       'Traceback (most recent call last):\n  File "train.py", line 3\nValueError: bad shard"\n'
                       'Command "mpirun -np 4"')


def test_without_a_notice_the_first_traceback_is_blamed():
    output, _ = _fed(MAP + "\n[1,3]<stderr>:Traceback (most recent call last):\n[1,3]<stderr>:KeyError: 'x'")
    assert "MPI rank 3 on algo-2 failed first:" in output.failure(1, ["mpirun"])
