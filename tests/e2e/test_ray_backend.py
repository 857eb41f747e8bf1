"""The Ray backend end to end on a real multi-node Ray cluster on this machine (every node on
127.0.0.1, one CPU each, so each instance gets a node of its own): the contract-dump DDP job gives the
same results as on the local backend apart from addresses, with nothing shared through the job
directory (code, data and artifacts go through S3); a job waits, Pending, until a node is added; a
node removed mid-training is reported as lost, naming the node. Stops, max_run, a killed controller,
hang detection, the debugger and the profiler end as on the local backend, and every job that ends
leaves nothing on the cluster: no actor, no placement group, no process, all CPUs free."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from shipyard import Estimator
from shipyard.backends.sandbox import bwrap_problem
from shipyard.debugger import CollectionConfig, DebuggerHookConfig, Rule
from shipyard.debugger import rule_configs as debugger_rules
from shipyard.errors import UnexpectedStatusError
from shipyard.profiler import FrameworkProfile, ProfilerConfig, ProfilerRule
from shipyard.profiler import rule_configs as profiler_rules
from shipyard.pytorch import PyTorch
from shipyard.rules.profiler.data import ProfilerReader
from shipyard.sdk.inputs import TrainingInput
from shipyard.storage import transfer
from shipyard.store import Store
from tests.conftest import clean_home

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).parent / "scripts"
WORKERS = 2
QUICK_HEALTH_CHECKS = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "2000",
                       "RAY_health_check_failure_threshold": "3"}


@pytest.fixture(scope="module")
def ray_cluster():
    """A head node with no CPUs (so no instance lands there) and WORKERS one-CPU nodes. Module-scoped: this
    process's Ray connection (_on_cluster) runs a thread that calls gc.collect() when Ray asks, which
    crashed later tests that profile in this process (torch.profiler, cProfile) at random points."""
    from ray.cluster_utils import Cluster

    with pytest.MonkeyPatch.context() as patch:
        # The nodes' processes (a controller on the head among them) stay on loopback too (on_ray says why).
        patch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        # Ray's health checks, quicker than its defaults: a removed node is noticed in about 3 s, not 30.
        for name, value in QUICK_HEALTH_CHECKS.items():
            patch.setenv(name, value)
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "node_ip_address": "127.0.0.1", "include_dashboard": False})
        for _ in range(WORKERS):
            cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    yield cluster
    import ray

    ray.shutdown()   # this process's own connection, made to look at the cluster (_on_cluster)
    cluster.shutdown()


@pytest.fixture
def on_ray(ray_cluster, monkeypatch, tmp_path):
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster.address)
    # Ray turns a 127.0.0.1 address into this machine's outward address, where nodes bound to loopback do not
    # listen; this (Ray's own switch for one-machine clusters) keeps the controller on loopback.
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    # The same for this process (_on_cluster connects it), which read the variable when it imported Ray.
    monkeypatch.setattr("ray._private.ray_constants.ENABLE_RAY_CLUSTER", False)
    monkeypatch.setenv("SHIPYARD_RAY_NODE_DIR", str(tmp_path / "nodes"))
    yield ray_cluster
    # Leave the cluster as the next test expects it: WORKERS live one-CPU nodes.
    while len(ray_cluster.worker_nodes) > WORKERS:
        ray_cluster.remove_node(next(iter(ray_cluster.worker_nodes)))
    while len(ray_cluster.worker_nodes) < WORKERS:
        ray_cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    ray_cluster.wait_for_nodes()


def _members(uri: str, tmp: Path) -> dict[str, bytes]:
    tmp.mkdir(parents=True, exist_ok=True)
    transfer.download(uri, tmp)
    with tarfile.open(tmp / Path(uri).name) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _contract_job(source: Path, bucket: str, backend: str) -> dict:
    est = PyTorch(
        entry_point="train.py", source_dir=str(source), instance_count=2, instance_type="local",
        hyperparameters={"epochs": 3, "note": "a b; $(rm -rf /)"},
        distribution={"torch_distributed": {"enabled": True, "processes_per_host": 2}},
        output_path="s3://out/jobs", environment={"FOO": "1"}, max_run=600, base_job_name=f"contract-{backend}",
        metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"}], stop_grace_seconds=5, backend=backend,
    )
    est.fit({"train": f"{bucket}/train", "test": TrainingInput(f"{bucket}/test", distribution="ShardedByS3Key")},
            wait=True, logs=False)
    return est.latest_training_job.describe()


def _normalized(record: dict, name: str) -> dict:
    """The record with what must differ between two jobs removed: the job's name, its rendezvous port,
    and the address algo-1 resolves to (a loopback address per instance locally, the node's on Ray)."""
    text = json.dumps(record).replace(name, "JOB")
    record = json.loads(text)
    record["env"].pop("MASTER_PORT")
    record.pop("algo_1")
    record["env"]["SM_TRAINING_ENV"] = json.loads(record["env"]["SM_TRAINING_ENV"])
    return record


@pytest.mark.sandbox  # the /opt/ml contract
def test_contract_dump_ddp_job_matches_the_local_backend(home, s3, on_ray, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(SCRIPTS / "contract_dump.py", source / "train.py")
    shutil.copy(SCRIPTS / "helper.py", source)
    bucket = s3.bucket("data")
    for i in range(4):
        s3.put(f"{bucket}/train/part-{i}.csv", f"{i}\n".encode())
        s3.put(f"{bucket}/test/t{i}.txt", f"{i}\n".encode())
    s3.bucket("out")

    records, descriptions = {}, {}
    for backend in ("ray", "local"):
        description = _contract_job(source, bucket, backend)
        assert description["TrainingJobStatus"] == "Completed", description.get("FailureReason")
        name = description["TrainingJobName"]
        model = _members(description["ModelArtifacts"]["S3ModelArtifacts"], tmp_path / backend / "model")
        assert set(model) == {"algo-1.json", "algo-2.json"}
        output = _members(f"s3://out/jobs/{name}/output/output.tar.gz", tmp_path / backend / "output")
        assert output == {"algo-1.txt": b"algo-1", "algo-2.txt": b"algo-2"}
        records[backend] = {h: json.loads(model[f"{h}.json"]) for h in ("algo-1", "algo-2")}
        descriptions[backend] = description
        # Every line of every process, copied from the node into the host's log file here.
        for host, ranks in (("algo-1", (0, 1)), ("algo-2", (2, 3))):
            log = (home / "jobs" / name / "logs" / f"{host}.log").read_text().splitlines()
            for rank in ranks:
                assert [line for line in log if line.endswith(f"of rank {rank}")] == [
                    f"{host}[{rank % 2}] | line {i} of rank {rank}" for i in range(50)]

    ray, local = descriptions["ray"], descriptions["local"]
    assert [t["Status"] for t in ray["SecondaryStatusTransitions"]] == [
        t["Status"] for t in local["SecondaryStatusTransitions"]]
    assert {m["MetricName"] for m in ray["FinalMetricDataList"]} == {"loss"}
    for host in ("algo-1", "algo-2"):
        on_ray, on_local = records["ray"][host], records["local"][host]
        assert on_ray["world"] == 4 and on_ray["allreduce"] == 10.0     # one process group across nodes
        assert on_local["algo_1"] == "127.0.1.1" and on_ray["algo_1"] == "127.0.0.1"  # the node's address
        assert _normalized(on_ray, ray["TrainingJobName"]) == _normalized(on_local, local["TrainingJobName"])
    # Sharded by key across the nodes, each node downloading its own share.
    shards = [set(records["ray"][h]["channels"]["test"]) for h in ("algo-1", "algo-2")]
    assert not shards[0] & shards[1] and shards[0] | shards[1] == {f"t{i}.txt" for i in range(4)}
    # Nothing of the job was left on the nodes' side but the logs and events they streamed.
    assert not list((tmp_path / "nodes").glob("*/instances/*/ml"))


LOOP = """
    import os, time
    for step in range(1, STEPS + 1):
        print(f"step={step} on {os.environ['SM_CURRENT_HOST']}", flush=True)
        time.sleep(0.2)
    open(os.environ["SM_MODEL_DIR"] + "/done-" + os.environ["SM_CURRENT_HOST"], "w").write("ok")
"""


def _loop_source(tmp_path: Path, steps: int) -> Path:
    source = tmp_path / "loop"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent(LOOP).replace("STEPS", str(steps)))
    return source


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _estimator(source: Path, **fields) -> Estimator:
    """A job of train.py in `source`, its output in s3://out/jobs (which must exist)."""
    return Estimator(entry_point="train.py", source_dir=str(source), output_path="s3://out/jobs",
                     stop_grace_seconds=5, **{"max_run": 600, "instance_count": 2, **fields})


def test_job_waits_pending_for_capacity_then_runs_when_a_node_is_added(home, s3, on_ray, tmp_path, monkeypatch):
    s3.bucket("out")
    monkeypatch.setenv("SHIPYARD_BACKEND", "ray")   # the setting, not the argument
    est = _estimator(_loop_source(tmp_path, 3), instance_count=WORKERS + 1)
    est.fit(wait=False)
    job = est.latest_training_job
    store = Store()
    pending = _wait_for(lambda: job.describe()["SecondaryStatus"] == "Pending" and job.describe(), 60, "Pending")
    assert pending["TrainingJobStatus"] == "InProgress"
    message = pending["SecondaryStatusTransitions"][-1]["StatusMessage"]
    assert message.startswith(f"waiting for capacity: {WORKERS + 1} instance(s) of {{CPU: 1}}, each on its own node")
    assert f"{WORKERS} of the cluster's" in message and "add nodes" in message
    time.sleep(3)
    assert job.describe()["SecondaryStatus"] == "Pending"   # waiting is not failing
    on_ray.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    job.wait(logs=False)
    description = job.describe()
    assert description["TrainingJobStatus"] == "Completed", description.get("FailureReason")
    statuses = [t["Status"] for t in description["SecondaryStatusTransitions"]]
    assert statuses[:3] == ["Starting", "Pending", "Starting"] and statuses[-1] == "Completed"
    assert store.get_job(job.name).spec.backend == "ray"
    model = _members(description["ModelArtifacts"]["S3ModelArtifacts"], tmp_path / "model")
    assert set(model) == {f"done-algo-{i}" for i in range(1, WORKERS + 2)}


def _node_of(log: Path, host: str, cluster) -> object:
    """The cluster node an instance was placed on, from the line the backend writes in its host log."""
    line = next(line for line in log.read_text().splitlines() if f"{host} started on node " in line)
    prefix = line.split(f"{host} started on node ")[1].split(" ")[0]
    return next(n for n in cluster.worker_nodes if n.node_id.startswith(prefix))


def _remove_algo_2_node_once_logged(est: Estimator, home: Path, cluster, line: str):
    """Starts the job, and once algo-2's log has `line` removes algo-2's node as a crash would (not
    gracefully). Returns the job, algo-2's log and the removed node."""
    est.fit(wait=False)
    job = est.latest_training_job
    log = home / "jobs" / job.name / "logs" / "algo-2.log"
    _wait_for(lambda: log.exists() and line in log.read_text(), 120, f"{line!r} in algo-2's log")
    node = _node_of(log, "algo-2", cluster)
    cluster.remove_node(node, allow_graceful=False)
    return job, log, node


def test_node_removed_mid_training_fails_the_job_naming_the_node(home, s3, on_ray, tmp_path):
    s3.bucket("out")
    est = _estimator(_loop_source(tmp_path, 600), backend="ray")
    job, log, node = _remove_algo_2_node_once_logged(est, home, on_ray, "step=3 on algo-2")
    with pytest.raises(Exception, match="Failed"):
        job.wait(logs=False)
    description = job.describe()
    assert description["TrainingJobStatus"] == "Failed"
    reason = description["FailureReason"]
    assert reason.startswith("InternalServerError: algo-2: node ") and node.node_id in reason and "died" in reason
    assert "lost: node" in log.read_text()   # said in the host's log too


def _of_test(name: str, attribute: str):
    """Something of the local backend's e2e test module `name` (a script, a source maker), reused as it is."""
    spec = importlib.util.spec_from_file_location(f"{name}_for_ray", Path(__file__).parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # where its dataclasses look their module up
    spec.loader.exec_module(module)
    return getattr(module, attribute)


def test_node_removed_mid_training_restarts_the_spot_job_on_a_live_node(home, s3, on_ray, tmp_path):
    """The controller treats a lost instance of a spot job as an interruption of that host: the attempt ends
    Interrupted and the next one runs on the nodes that are alive (one added after the loss)."""
    s3.bucket("out")
    source = _of_test("test_spot", "_source")(tmp_path, total=150)
    est = _estimator(source, use_spot_instances=True, checkpoint_s3_uri="s3://out/ckpt", max_run=300, max_wait=400,
                     interruption_notice_seconds=5, backend="ray")
    # 6 s in: a checkpoint replaced every 0.5 s reaches S3 within about 3 s of the first (two sync scans), so
    # step 30 raced the upload on a loaded machine and the restart could find nothing of algo-2's
    job, log, lost = _remove_algo_2_node_once_logged(est, home, on_ray, "step=60")
    time.sleep(3)
    on_ray.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    job.wait(logs=False)
    description = job.describe()
    assert description["TrainingJobStatus"] == "Completed", description.get("FailureReason")
    assert [a["Outcome"] for a in description["Shipyard"]["Attempts"]] == ["Interrupted", "Completed"]
    assert "Interrupted" in [t["Status"] for t in description["SecondaryStatusTransitions"]]
    text = log.read_text()
    assert f"algo-2 lost: node {lost.node_id} (127.0.0.1) died" in text
    restarted = text.split("lost: node")[1].split("algo-2 started on node ")[1].split(" ")[0]
    assert not lost.node_id.startswith(restarted)
    # The new attempt resumed from a checkpoint the lost node had synced, not from step 0.
    resumed = [int(line.split()[-1]) for line in text.split("lost: node")[1].splitlines()
               if line.startswith("resumed from step")]
    assert len(resumed) == 1 and resumed[0] >= 10, resumed


def _on_cluster(cluster, job: str) -> dict:
    """What the cluster's GCS holds of a job: the hosts with a live actor (named
    shipyard:<job>:<placement>:<host>), the states of its placement groups not removed, the CPUs free."""
    import ray
    from ray.util.placement_group import placement_group_table

    if not ray.is_initialized():
        ray.init(address=cluster.address, namespace="shipyard-tests", log_to_driver=False, logging_level="WARNING")
    prefix = f"shipyard:{job}:"
    return {
        "actors": sorted(a["name"].rsplit(":", 1)[1] for a in ray.util.list_named_actors(all_namespaces=True)
                         if a["name"].startswith(prefix)),
        "groups": sorted(g["state"] for g in placement_group_table().values()
                         if g["name"].startswith(prefix) and g["state"] != "REMOVED"),
        "free CPUs": ray.available_resources().get("CPU", 0.0),
    }


def _processes_of(job: str) -> list[str]:
    """The job's training processes on this machine, which is every node of the test cluster."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if proc.environ().get("TRAINING_JOB_NAME") == job:
                found.append(" ".join(proc.info["cmdline"] or []))
        except psutil.Error:
            continue
    return found


def _settles(view, want: dict, timeout: float) -> None:
    """Waits until view() gives `want`, at most `timeout` seconds; a failure shows what differs."""
    deadline = time.monotonic() + timeout
    while (seen := view()) != want and time.monotonic() < deadline:
        time.sleep(0.5)
    assert seen == want


def _runs_on_cluster(cluster, job: str) -> None:
    """The job's two instances hold the cluster: an actor each, its placement group, both nodes' CPUs."""
    _settles(lambda: _on_cluster(cluster, job), {"actors": ["algo-1", "algo-2"], "groups": ["CREATED"],
                                                "free CPUs": WORKERS - 2.0}, 60)
    assert _processes_of(job)


def _left_nothing(cluster, job: str) -> None:
    """No actor, placement group or process of the job is left, and every CPU is free again."""
    _settles(lambda: {**_on_cluster(cluster, job), "processes": _processes_of(job)},
             {"actors": [], "groups": [], "free CPUs": float(WORKERS), "processes": []}, 60)


STOPPABLE = """
    import os, signal, sys, time
    host, model = os.environ["SM_CURRENT_HOST"], os.environ["SM_MODEL_DIR"]
    if host == "algo-1":
        def on_term(*_):   # appends: a second SIGTERM while it saves would show
            open(model + "/saved-on-sigterm", "a").write(host)
            time.sleep(1)
            sys.exit(0)
        signal.signal(signal.SIGTERM, on_term)
    else:  # ends only when killed, after the grace
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open(model + "/early", "w").write(host)
    print(f"up on {host}", flush=True)
    time.sleep(600)
"""


def test_stopped_job_keeps_what_its_instances_saved_and_leaves_nothing_on_the_cluster(home, s3, on_ray, tmp_path,
                                                                                      wait_for_line):
    """Stopped by the user, as locally (tests/e2e/test_outcomes.py; max_run stops a job the same way there):
    algo-1's script saves on SIGTERM, algo-2's ignores it and is killed after the grace; what both wrote is
    kept, and so are the logs."""
    s3.bucket("out")
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent(STOPPABLE))
    est = _estimator(source, backend="ray", max_run=600)
    est.fit(wait=False)
    job = est.latest_training_job
    logs = [Store().log_path(job.name, host) for host in ("algo-1", "algo-2")]
    for host, log in zip(("algo-1", "algo-2"), logs, strict=True):
        wait_for_line(log, f"up on {host}", timeout=120)
    _runs_on_cluster(on_ray, job.name)
    job.stop()
    with pytest.warns(UserWarning, match=r"was stopped \(Stopped\)"):
        job.wait(logs=False)
    description = job.describe()
    assert (description["TrainingJobStatus"], description["SecondaryStatus"]) == ("Stopped", "Stopped")
    assert "Stopping" in [t["Status"] for t in description["SecondaryStatusTransitions"]]
    model = _members(description["ModelArtifacts"]["S3ModelArtifacts"], tmp_path / "model")
    assert model == {"saved-on-sigterm": b"algo-1", "early": b"algo-2"}
    for host, log in zip(("algo-1", "algo-2"), logs, strict=True):
        assert f"up on {host}" in log.read_text()
    _left_nothing(on_ray, job.name)
    assert not list((tmp_path / "nodes").glob("*/instances/*/ml"))


@pytest.mark.parametrize("sandbox", ["on", "off"])
def test_killed_controller_takes_its_instances_off_the_cluster(home, s3, on_ray, tmp_path, monkeypatch, wait_for_line,
                                                               sandbox):
    """The controller owns the actors (Ray's ownership) and the placement group (its Ray job): when it dies
    they go, and the scripts with them (with their sandbox, or, without one, killed by the node's reaper);
    any read of the job then says why it failed, as locally."""
    if sandbox == "on" and (problem := bwrap_problem()):
        pytest.skip(f"no sandbox here: {problem}")
    monkeypatch.setenv("SHIPYARD_SANDBOX", sandbox)
    s3.bucket("out")
    est = _estimator(_loop_source(tmp_path, 600), backend="ray")
    est.fit(wait=False)
    job = est.latest_training_job
    log = Store().log_path(job.name, "algo-2")
    wait_for_line(log, "step=3 on algo-2", timeout=120)
    _runs_on_cluster(on_ray, job.name)
    controller = psutil.Process(Store().get_job(job.name).controller_pid)
    controller.send_signal(signal.SIGKILL)
    controller.wait(10)
    description = job.describe()
    assert description["TrainingJobStatus"] == "Failed"
    assert f"controller (pid {controller.pid}) stopped" in description["FailureReason"]
    assert [a["Outcome"] for a in description["Shipyard"]["Attempts"]] == ["Failed"]
    assert "step=3 on algo-2" in log.read_text()
    _left_nothing(on_ray, job.name)


def test_hung_rank_is_named_across_nodes(home, s3, on_ray, tmp_path):
    """The heartbeats copied from the nodes show which rank hung, as locally (tests/e2e/test_hang.py)."""
    s3.bucket("out")
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent(_of_test("test_hang", "SCRIPT")))
    est = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=2, output_path="s3://out/jobs",
                  distribution={"torch_distributed": {"enabled": True}}, hang_timeout_seconds=8,
                  stop_grace_seconds=5, backend="ray", max_run=300)   # should the hang go unnoticed
    with pytest.raises(UnexpectedStatusError) as failure:
        est.fit(logs=False)
    reason = failure.value.reason
    assert reason.startswith("AlgorithmError: Hang: no rank made progress for 8 s (last optimizer step 4)"), reason
    assert "rank 1 on algo-2 is not waiting for the others: it is at train.py:" in reason
    assert "rank 0 waits in a collective" in reason
    _left_nothing(on_ray, est.latest_training_job.name)


def test_debugger_and_profiler_rules_judge_what_every_node_uploaded(home, s3, on_ray, shipyard_server):
    """One job, each instance on its own node: DeadRelu fires on the tensors the nodes saved, and the
    profiler has system metrics and step times from both, which MaxInitializationTime judges. The server
    shows the job as it shows a local one."""
    s3.bucket("out")
    relu_every_step = [CollectionConfig(name="relu_output", parameters={"save_interval": "1"})]
    steps = 20
    est = PyTorch(entry_point=str(SCRIPTS / "rules_mlp.py"), instance_count=2, output_path="s3://out/jobs",
                  backend="ray", hyperparameters={"dead": 1, "steps": steps, "sleep": 0.1},
                  debugger_hook_config=DebuggerHookConfig(hook_parameters={"save_interval": "1"}),
                  profiler_config=ProfilerConfig(system_monitor_interval_millis=200,
                                                 framework_profile_params=FrameworkProfile()),
                  rules=[Rule.sagemaker(debugger_rules.dead_relu(), collections_to_save=relu_every_step),
                         ProfilerRule.sagemaker(profiler_rules.MaxInitializationTime())])
    est.fit(logs=False)
    job = est.latest_training_job
    description = job.describe()
    dead = {s["RuleConfigurationName"]: s for s in description["DebugRuleEvaluationStatuses"]}["DeadRelu"]
    assert dead["RuleEvaluationStatus"] == "IssuesFound", dead
    assert "at step 0 resulted in the condition being met" in dead["StatusDetails"]
    assert "fc1_relu_output_0" in dead["StatusDetails"]
    profiled = {s["RuleConfigurationName"]: s for s in description["ProfilerRuleEvaluationStatuses"]}
    initialization = profiled["MaxInitializationTime"]
    assert initialization["RuleEvaluationStatus"] == "NoIssuesFound", initialization
    assert "the first step started" in initialization["StatusDetails"]

    data = ProfilerReader(f"s3://out/jobs/{job.name}/profiler-output").read()
    assert {r["NodeId"] for r in data.system} == {"algo-1", "algo-2"}
    for host in ("algo-1", "algo-2"):
        assert [s.step for s in data.step_durations(host)] == list(range(2, steps + 1)), host
    nodes = {_node_of(Store().log_path(job.name, host), host, on_ray).node_id for host in ("algo-1", "algo-2")}
    assert len(nodes) == 2
    _left_nothing(on_ray, job.name)

    row = shipyard_server.get(f"/api/jobs/{job.name}")[1]["job"]
    assert (row["backend"], row["status"], row["instance_count"]) == ("ray", "Completed", 2)
    assert set(shipyard_server.get(f"/api/jobs/{job.name}/system")[1]["hosts"]) == {"algo-1", "algo-2"}
    assert {(r["rule"], r["status"]) for r in shipyard_server.get(f"/api/jobs/{job.name}/rules")[1]} == \
        {("DeadRelu", "IssuesFound"), ("MaxInitializationTime", "NoIssuesFound")}
    for host in ("algo-1", "algo-2"):
        lines = shipyard_server.get(f"/api/jobs/{job.name}/logs/{host}?search=loss")[1]["lines"]
        assert len(lines) == steps, host


def _pool_actors(cluster, pool: str) -> list[str]:
    """The hosts with a live actor of the warm pool (named shipyard-pool:<pool>:<host>)."""
    _on_cluster(cluster, "-")   # connects this process
    import ray

    prefix = f"shipyard-pool:{pool}:"
    return sorted(a["name"].rsplit(":", 1)[1] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["name"].startswith(prefix))


@pytest.mark.sandbox
def test_a_warm_pool_on_ray_is_reused_then_ends_with_a_node_lost_while_idle(home, s3, on_ray, tmp_path):
    """Issue 16 on Ray: the pool is the job's actors kept in their placement group; the next job runs on the
    same actors and nodes; a node lost while the pool is idle ends the pool, and the next job starts cold."""
    from shipyard.store.pools import PoolStore

    s3.bucket("out")
    est = _estimator(_loop_source(tmp_path, 3), backend="ray", keep_alive_period_in_seconds=300)
    est.fit(logs=False)
    first = est.latest_training_job
    assert first.describe()["WarmPoolStatus"]["Status"] == "Available"
    assert _pool_actors(on_ray, first.name) == ["algo-1", "algo-2"]
    est.fit(logs=False)
    second = est.latest_training_job
    assert first.describe()["WarmPoolStatus"]["ReusedByJob"] == second.name
    assert second.describe()["WarmPoolStatus"]["Status"] == "Available"
    logs = {name: (home / "jobs" / name / "logs" / "algo-2.log").read_text() for name in (first.name, second.name)}
    nodes = {name: _node_of(home / "jobs" / name / "logs" / "algo-2.log", "algo-2", on_ray).node_id for name in logs}
    assert nodes[first.name] == nodes[second.name]             # the same node, the same actor
    assert "step=3 on algo-2" in logs[second.name]

    lost = _node_of(home / "jobs" / second.name / "logs" / "algo-2.log", "algo-2", on_ray)
    on_ray.remove_node(lost, allow_graceful=False)
    pools = PoolStore(Store())
    _wait_for(lambda: pools.get(first.name).status == "Terminated", 60, "the pool to end")
    assert pools.get(first.name).end_reason == "warm instance algo-2 died"
    _settles(lambda: _pool_actors(on_ray, first.name), [], 60)
    on_ray.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    est.fit(logs=False)   # cold, its own pool
    third = est.latest_training_job
    assert pools.use(third.name)["pool"] == third.name
    third.update(0)
    _settles(lambda: _pool_actors(on_ray, third.name), [], 60)
    _settles(lambda: _on_cluster(on_ray, "-")["free CPUs"], float(WORKERS), 60)


@pytest.mark.sandbox
def test_instance_groups_land_on_nodes_of_their_type(home, s3, on_ray, tmp_path):
    """Issue 18 on Ray: the data group's type (a catalog type, so a custom resource) waits Pending until a node
    that offers it joins, and lands there; the train group runs torch DDP on the other nodes."""
    from shipyard.instance_group import InstanceGroup

    home.mkdir(parents=True, exist_ok=True)
    (home / "instance_types.yaml").write_text("ml.test.data:\n  vcpus: 1\n  memory_gib: 1\n  gpus: 0\n")
    s3.bucket("out")
    source = tmp_path / "hetero"
    source.mkdir()
    shutil.copy(Path(__file__).resolve().parents[2] / "examples" / "heterogeneous" / "src" / "train.py",
                source / "train.py")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data, trainers = InstanceGroup("data", "ml.test.data", 1), InstanceGroup("train", "local", 2)
    est = PyTorch(entry_point="train.py", source_dir=str(source), instance_groups=[data, trainers], backend="ray",
                  distribution={"torch_distributed": {"enabled": True}, "instance_groups": [trainers]},
                  hyperparameters={"port": port, "batches": 8, "consumers": 2}, output_path="s3://out/jobs",
                  max_run=300, stop_grace_seconds=5)
    est.fit(wait=False)
    job = est.latest_training_job
    pending = _wait_for(lambda: job.describe()["SecondaryStatus"] == "Pending" and job.describe(), 60, "Pending")
    message = pending["SecondaryStatusTransitions"][-1]["StatusMessage"]
    assert message.startswith("waiting for capacity: 1 instance(s) of {CPU: 1, instance_type:ml.test.data: 1} + "
                              "2 instance(s) of {CPU: 1}"), message
    assert "no node offers instance_type:ml.test.data" in message
    time.sleep(2)
    assert job.describe()["SecondaryStatus"] == "Pending"
    typed = on_ray.add_node(num_cpus=1, resources={"instance_type:ml.test.data": 1}, node_ip_address="127.0.0.1")
    job.wait(logs=False)
    description = job.describe()
    assert description["TrainingJobStatus"] == "Completed", description.get("FailureReason")
    logs = home / "jobs" / job.name / "logs"
    assert _node_of(logs / "algo-1.log", "algo-1", on_ray).node_id == typed.node_id
    assert all(_node_of(logs / f"{h}.log", h, on_ray).node_id != typed.node_id for h in ("algo-2", "algo-3"))
    reports = [json.loads(line.split("HETERO ", 1)[1]) for h in ("algo-1", "algo-2", "algo-3")
               for line in (logs / f"{h}.log").read_text().splitlines() if "HETERO {" in line]
    assert sorted((r["host"], r["group"], r["instance_type"], r["torchrun"]) for r in reports) == [
        ("algo-1", "data", "ml.test.data", False), ("algo-2", "train", "local", True),
        ("algo-3", "train", "local", True)]
    assert sorted(r["all_received"] for r in reports if r["group"] == "train") == [16, 16]


def test_a_controller_on_the_cluster_outlives_its_submitter_and_is_followed_from_elsewhere(home, s3, on_ray, tmp_path,
                                                                                         monkeypatch):
    """`--controller cluster --detach`: the job is recorded in the cluster's home (an actor on the head, with a
    store of its own) and its controller runs there; the submitting process exits at once. Another machine's
    shipyard (its own empty SHIPYARD_HOME) follows the logs to the end, describes the job and attaches to it
    through the cluster alone; lists the home's jobs; and a home that dies is made again over the same
    store."""
    import ray

    from shipyard.control import cluster_home
    from shipyard.control.controller import CONTROLLER_ENVIRONMENT

    s3.bucket("out")
    try:
        monkeypatch.setenv("SHIPYARD_RAY_HOME", str(tmp_path / "cluster-home"))
        source = _loop_source(tmp_path, 25)
        cli = [sys.executable, "-m", "shipyard.cli.main"]
        submitted = subprocess.run([*cli, "run", "train.py", "--source-dir", str(source), "--instance-count", "2",
                                    "--output-path", "s3://out/jobs", "--backend", "ray", "--controller", "cluster",
                                    "--detach"], capture_output=True, text=True, timeout=120)
        assert submitted.returncode == 0, submitted.stderr
        name = submitted.stdout.strip()
        assert not Store(home).exists(name)   # the submitting machine keeps nothing of it
        elsewhere = {**os.environ, "SHIPYARD_HOME": str(tmp_path / "elsewhere")}
        followed = subprocess.run([*cli, "logs", name, "--follow"], env=elsewhere, capture_output=True, text=True,
                                  timeout=180)
        assert followed.returncode == 0, followed.stderr
        for host in ("algo-1", "algo-2"):
            steps = [line.split("step=")[1] for line in followed.stdout.splitlines()
                     if line.startswith(host) and "step=" in line]
            assert steps == [f"{step} on {host}" for step in range(1, 26)]
        described = subprocess.run([*cli, "describe", name], env=elsewhere, capture_output=True, text=True, timeout=60)
        assert json.loads(described.stdout)["TrainingJobStatus"] == "Completed"
        listed = subprocess.run([*cli, "jobs", "list", "--on-cluster", "-o", "json"], env=elsewhere,
                                capture_output=True, text=True, timeout=60)
        assert [(row["name"], row["status"]) for row in json.loads(listed.stdout)] == [(name, "Completed")]
        monkeypatch.setenv("SHIPYARD_HOME", str(tmp_path / "elsewhere"))
        attached = Estimator.attach(name)
        assert (attached.backend, attached.controller) == ("ray", "cluster")   # as the record says
        model = attached.latest_training_job.describe()["ModelArtifacts"]["S3ModelArtifacts"]
        assert _members(model, tmp_path / "model") == {"done-algo-1": b"ok", "done-algo-2": b"ok"}
        # The record and the controller lived on the head, in the home's store.
        actor = ray.get_actor(cluster_home.ACTOR_NAME, namespace=cluster_home.NAMESPACE)
        head = next(n["NodeID"] for n in ray.nodes() if n["Resources"].get("node:__internal_head__"))
        where = ray.get(actor.where.remote())
        assert where == {"home": str(tmp_path / "cluster-home"), "node_id": head, "pid": where["pid"]}
        # The home's process killed: Ray starts it again. The home removed: the next reader makes it again.
        # Either way it reads the same store.
        os.kill(where["pid"], signal.SIGKILL)
        for end in ("killed", "removed"):
            described = subprocess.run([*cli, "describe", name], env=elsewhere, capture_output=True, text=True,
                                       timeout=60)
            assert json.loads(described.stdout)["TrainingJobStatus"] == "Completed", (end, described.stderr)
            actor = ray.get_actor(cluster_home.ACTOR_NAME, namespace=cluster_home.NAMESPACE)
            assert ray.get(actor.where.remote())["pid"] != where["pid"]
            ray.kill(actor)
        job_dir = tmp_path / "cluster-home" / "jobs" / name
        assert "controller: peak memory" in (job_dir / "controller.log").read_text()
        forwarded = json.loads((job_dir / CONTROLLER_ENVIRONMENT).read_text())
        assert (job_dir / CONTROLLER_ENVIRONMENT).stat().st_mode & 0o777 == 0o600
        assert forwarded["SHIPYARD_S3_ENDPOINT_URL"] == os.environ["SHIPYARD_S3_ENDPOINT_URL"]
        assert "SHIPYARD_HOME" not in forwarded
        _left_nothing(on_ray, name)
    finally:   # the home, and a controller it started (no child of this process) if the job did not end
        with contextlib.suppress(ValueError):
            ray.kill(ray.get_actor(cluster_home.ACTOR_NAME, namespace=cluster_home.NAMESPACE))
        clean_home(tmp_path / "cluster-home")


def test_built_in_xgboost_and_an_smddp_script_run_on_the_nodes(home, s3, on_ray, tmp_path):
    """Issue 24 on Ray: the built-in XGBoost algorithm (an image and hyperparameters, no code) trains one model
    over XGBoost's collective, the tracker on algo-1's node, each node with a whole copy of the CSV
    (FullyReplicated; the local test shards it); and a script importing SageMaker's SMDDP gets the served
    library in the processes the nodes start."""
    from shipyard import image_uris

    bucket, out = s3.bucket("data"), s3.bucket("out")
    rows = [[float(i % 7) / 7, float(i % 5) / 5, float(i % 3) / 3] for i in range(300)]
    labels = [3 * x - 2 * y for x, y, _ in rows]
    for part in range(2):   # label first, no header
        lines = [",".join(f"{v:.6f}" for v in (labels[i], *rows[i])) for i in range(part * 150, part * 150 + 150)]
        s3.put(f"{bucket}/train/part-{part}.csv", ("\n".join(lines) + "\n").encode())
    s3.put(f"{bucket}/validation/validation.csv", s3.get(f"{bucket}/train/part-0.csv"))
    xgb = Estimator(image_uri=image_uris.retrieve("xgboost", "us-west-2", "1.7-1"), instance_count=2,
                    instance_type="local", output_path=f"{out}/jobs", backend="ray", max_run=300,
                    stop_grace_seconds=5, hyperparameters={"num_round": 10, "max_depth": 3, "eval_metric": "rmse"})
    xgb.fit({"train": TrainingInput(f"{bucket}/train", content_type="text/csv", distribution="FullyReplicated"),
             "validation": TrainingInput(f"{bucket}/validation", content_type="text/csv")}, logs=False)
    job = xgb.latest_training_job
    description = job.describe()
    assert description["TrainingJobStatus"] == "Completed", description.get("FailureReason")
    logs = {host: Store().log_path(job.name, host).read_text() for host in ("algo-1", "algo-2")}
    nodes = {_node_of(Store().log_path(job.name, host), host, on_ray).node_id for host in logs}
    assert len(nodes) == 2
    for host, rank in (("algo-1", 0), ("algo-2", 1)):
        assert "channel train: 300 rows (csv, FullyReplicated)" in logs[host]
        assert f"worker {host}: rank {rank} of world size 2" in logs[host]
    assert "tracker on algo-1 at 127.0.0.1:" in logs["algo-1"] and "tracker on" not in logs["algo-2"]
    final = {m["MetricName"]: m["Value"] for m in description["FinalMetricDataList"]}
    assert set(final) == {"train:rmse", "validation:rmse"} and final["validation:rmse"] < 0.5
    assert "xgboost-model" in _members(description["ModelArtifacts"]["S3ModelArtifacts"], tmp_path / "xgb")
    _left_nothing(on_ray, job.name)

    source = tmp_path / "smddp"
    source.mkdir()
    shutil.copy(SCRIPTS / "smddp_train.py", source / "train.py")
    smddp = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=2, instance_type="local",
                    distribution={"smdistributed": {"dataparallel": {"enabled": True}}}, hyperparameters={"steps": 4},
                    output_path=f"{out}/jobs", backend="ray", max_run=300, stop_grace_seconds=5)
    smddp.fit(logs=False)
    reports = sorted((json.loads(data) for data in _members(smddp.model_data, tmp_path / "smddp-model").values()),
                     key=lambda r: r["rank"])
    # The smddp backend registered on both nodes (served by gloo here), and the pre-1.4 API on the same group.
    assert [(r["rank"], r["world"], r["host"], r["backend"], r["served_by"]) for r in reports] == [
        (0, 2, "algo-1", "smddp", "ProcessGroupGloo"), (1, 2, "algo-2", "smddp", "ProcessGroupGloo")]
    assert [r["legacy"]["sum"] for r in reports] == [3.0, 3.0]
    assert reports[0]["torch_ddp"]["params"] == reports[1]["torch_ddp"]["params"]
    _left_nothing(on_ray, smddp.latest_training_job.name)
