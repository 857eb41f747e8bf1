"""The Ray backend end to end on a real multi-node Ray cluster on this machine (every node on
127.0.0.1, one CPU each, so each instance gets a node of its own): the contract-dump DDP job gives the
same results as on the local backend apart from addresses, with nothing shared through the job
directory (code, data and artifacts go through S3); a job waits, Pending, until a node is added; a
node removed mid-training is reported as lost, naming the node."""

from __future__ import annotations

import importlib.util
import json
import shutil
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from shipyard import Estimator
from shipyard.pytorch import PyTorch
from shipyard.sdk.inputs import TrainingInput
from shipyard.storage import transfer
from shipyard.store import Store

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).parent / "scripts"
SANDBOX = shutil.which("bwrap") is not None
WORKERS = 2


@pytest.fixture(scope="session")
def ray_cluster():
    """A head node with no CPUs (so no instance lands there) and WORKERS one-CPU nodes."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "node_ip_address": "127.0.0.1", "include_dashboard": False})
    for _ in range(WORKERS):
        cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


@pytest.fixture
def on_ray(ray_cluster, monkeypatch, tmp_path):
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster.address)
    # Ray turns a 127.0.0.1 address into this machine's outward address, where nodes bound to loopback do not
    # listen; this (Ray's own switch for one-machine clusters) keeps the controller on loopback.
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
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


@pytest.mark.skipif(not SANDBOX, reason="the /opt/ml contract needs the bubblewrap sandbox")
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
                    f"line {i} of rank {rank}" for i in range(50)]

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


def _spot_stepper():
    """The spot tests' checkpointing script (tests/e2e/test_spot.py), reused as it is."""
    spec = importlib.util.spec_from_file_location("spot_tests", Path(__file__).parent / "test_spot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._source


def test_node_removed_mid_training_restarts_the_spot_job_on_a_live_node(home, s3, on_ray, tmp_path):
    """The controller treats a lost instance of a spot job as an interruption of that host: the attempt ends
    Interrupted and the next one runs on the nodes that are alive (one added after the loss)."""
    s3.bucket("out")
    source = _spot_stepper()(tmp_path, total=150)
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
    assert [a["Outcome"] for a in description["Attempts"]] == ["Interrupted", "Completed"]
    assert "Interrupted" in [t["Status"] for t in description["SecondaryStatusTransitions"]]
    text = log.read_text()
    assert f"algo-2 lost: node {lost.node_id} (127.0.0.1) died" in text
    restarted = text.split("lost: node")[1].split("algo-2 started on node ")[1].split(" ")[0]
    assert not lost.node_id.startswith(restarted)
    # The new attempt resumed from a checkpoint the lost node had synced, not from step 0.
    resumed = [int(line.split()[-1]) for line in text.split("lost: node")[1].splitlines()
               if line.startswith("resumed from step")]
    assert len(resumed) == 1 and resumed[0] >= 10, resumed
