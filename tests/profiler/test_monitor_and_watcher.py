"""The system monitor's files and its CPU measure (each instance's own processes), and the watcher judging
profiler rules from a profiler-output directory."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil
import pytest

from shipyard.profiler import ProfilerConfig, ProfilerRule, rule_configs
from shipyard.rules.profiler.data import ProfilerReader
from shipyard.rules.profiler.watcher import create
from shipyard.runtime.profiler.monitor import ProcessTreeCPU, SystemMonitor
from shipyard.spec.job import JobSpec
from shipyard.spec.rules import StopTraining


def _records(root, node: str) -> list[dict]:
    """Every record of a node's files: samples can straddle a minute, and so two files."""
    paths = sorted((root / "system" / "incremental").glob(f"*/*.{node}.json"))
    assert paths and all(int(path.name.split(".")[0]) % 60 == 0 for path in paths)  # the minute's epoch seconds
    return [json.loads(line) for path in paths for line in path.read_text().splitlines()]


def test_monitor_writes_sagemaker_json_lines(tmp_path):
    monitor = SystemMonitor(tmp_path, "algo-2", 100)
    monitor.sample()
    time.sleep(0.05)
    monitor.sample()
    records = _records(tmp_path, "algo-2")
    assert {tuple(sorted(r)) for r in records} == {("Dimension", "Name", "NodeId", "Timestamp", "Type", "Value")}
    kinds = {(r["Type"], r["Dimension"]) for r in records}
    assert {("cpu", "CPUUtilization"), ("cpu", "I/OWaitPercentage"), ("memory", ""), ("i/o", ""),
            ("network", "Algorithm")} <= kinds
    assert {r["Name"] for r in records if r["Type"] == "cpu"} >= {"cpu0"}
    assert len(ProfilerReader(str(tmp_path)).read().snapshots()) == 2


class Store:
    def __init__(self):
        self.statuses, self.events = {}, []

    def set_rule_status(self, job, kind, rule, status, details=""):
        assert kind == "profiler"
        self.statuses[rule] = (status, details)

    def add_event(self, job, kind, message):
        self.events.append(message)


def _trace(directory, durations):
    events = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros": 0}}]
    ts = 0
    for step, duration in enumerate(durations, start=2):
        events.append({"name": "Step:ModeKeys.TRAIN", "ph": "X", "pid": 0, "ts": ts, "dur": int(duration * 1e6),
                       "args": {"step_num": step, "node": "algo-1"}})
        ts += int(duration * 1e6)
    path = directory / "profiler-output" / "framework" / "pevents" / "2026112318"
    path.mkdir(parents=True)
    (path / "1_algo-1-rank0_model_timeline.json").write_text(json.dumps(events))


def test_watcher_sets_statuses_and_stops_the_job_when_asked(tmp_path):
    durations = [0.1] * 150
    durations[100] = 5.0  # step 102
    _trace(tmp_path / "j", durations)
    rules = (ProfilerRule.sagemaker(rule_configs.StepOutlier(), rule_parameters={"n_outliers": 0},
                                    actions=StopTraining()),
             ProfilerRule.sagemaker(rule_configs.CPUBottleneck()))
    spec = JobSpec(job_name="j", instance_count=1, output_path=str(tmp_path), rules=rules,
                   profiler_config=ProfilerConfig())
    store = Store()
    watcher = create(spec, tmp_path, store)
    assert store.statuses == {"StepOutlier": ("InProgress", ""), "CPUBottleneck": ("InProgress", "")}
    request = watcher.poll()
    assert request is not None and "StepOutlier" in request.message
    status, details = store.statuses["StepOutlier"]
    assert status == "IssuesFound"
    assert details.startswith("Evaluation of the rule StepOutlier at step 102 resulted in the condition being met")
    assert store.statuses["CPUBottleneck"][0] == "InProgress"
    watcher.finish()
    assert store.statuses["CPUBottleneck"][0] == "NoIssuesFound"
    assert store.statuses["StepOutlier"][0] == "IssuesFound"


def test_no_watcher_without_profiler_rules_or_with_profiling_off(tmp_path):
    spec = JobSpec(job_name="j", instance_count=1, output_path=str(tmp_path), profiler_config=ProfilerConfig())
    assert create(spec, tmp_path, Store()) is None
    assert create(JobSpec(job_name="j", instance_count=1, output_path=str(tmp_path)), tmp_path, Store()) is None


class FakeNVML:
    """NVML's functions as pynvml gives them, for a 2-GPU machine: gpu0 busy, gpu1 idle."""

    def __init__(self):
        self.shut = False

    def install(self, monkeypatch):
        import pynvml

        for name in ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
                     "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo"):
            monkeypatch.setattr(pynvml, name, getattr(self, name))

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, index):
        return f"handle{index}"

    def nvmlDeviceGetUtilizationRates(self, handle):
        import pynvml

        rates = pynvml.c_nvmlUtilization_t()
        rates.gpu, rates.memory = (97, 40) if handle == "handle0" else (3, 1)
        return rates

    def nvmlDeviceGetMemoryInfo(self, handle):
        import pynvml

        memory = pynvml.c_nvmlMemory_t()
        memory.total, memory.used = 80 * 2**30, (60 if handle == "handle0" else 8) * 2**30
        memory.free = memory.total - memory.used
        return memory


def test_monitor_records_each_gpu_through_nvml_and_gpu_rules_read_them(tmp_path, monkeypatch):
    from shipyard.spec.rule_parameters import parse_parameters
    from shipyard.spec.rules import rule_module

    nvml = FakeNVML()
    nvml.install(monkeypatch)
    monitor = SystemMonitor(tmp_path, "algo-1", 100)
    for _ in range(12):
        monitor.sample()
        time.sleep(0.025)  # snapshots more than 20 ms apart
    monitor.stop()
    assert nvml.shut
    gpu = [r for r in _records(tmp_path, "algo-1") if r["Type"] == "gpu"]
    assert {(r["Name"], r["Dimension"], r["Value"]) for r in gpu} == {
        ("gpu0", "GPUUtilization", 97.0), ("gpu0", "GPUMemoryUtilization", 75.0),
        ("gpu1", "GPUUtilization", 3.0), ("gpu1", "GPUMemoryUtilization", 10.0)}
    assert len(gpu) == 12 * 4 and {r["NodeId"] for r in gpu} == {"algo-1"}
    assert {tuple(sorted(r)) for r in gpu} == {("Dimension", "Name", "NodeId", "Timestamp", "Type", "Value")}

    data = ProfilerReader(str(tmp_path)).read()
    assert len(data.snapshots()) == 12
    judge = lambda rule, **p: rule_module("profiler", rule).evaluate(
        data, parse_parameters(rule, rule_module("profiler", rule).PARAMETERS, {k: str(v) for k, v in p.items()}),
        time.time(), True)
    low = judge("LowGPUUtilization", patience=5, window=10)
    assert low.triggered and "algo-1 gpu1 underutilised (p95 3%" in low.details and "gpu0" not in low.details
    balance = judge("LoadBalancing", patience=5)
    assert balance.triggered and "algo-1 gpu0 and algo-1 gpu1 differ" in balance.details
    assert not judge("GPUMemoryIncrease", patience=5, window=3).triggered


def test_monitor_without_nvml_records_no_gpu_and_says_so_once_at_debug(tmp_path, monkeypatch, caplog):
    import logging

    import pynvml

    def fail():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    with caplog.at_level(logging.DEBUG, logger="shipyard.runtime.profiler.monitor"):
        monitor = SystemMonitor(tmp_path, "algo-1", 100)
        monitor.sample()
        monitor.sample()
        monitor.stop()
    [line] = [r for r in caplog.records if r.name == "shipyard.runtime.profiler.monitor"]
    assert line.levelno == logging.DEBUG and "no GPU metrics: NVML did not initialise" in line.getMessage()
    records = ProfilerReader(str(tmp_path)).read().system
    assert records and not [r for r in records if r["Type"] == "gpu"]


def test_monitor_reports_only_the_instances_own_gpus(tmp_path, monkeypatch):
    """Two simulated instances on one 2-GPU machine: each reports the GPU it was given, as its gpu0."""
    FakeNVML().install(monkeypatch)
    for node, gpu_ids, busy in (("algo-1", ("0",), 97.0), ("algo-2", ("1",), 3.0)):
        monitor = SystemMonitor(tmp_path / node, node, 100, gpu_ids)
        monitor.sample()
        monitor.stop()
        gpu = [r for r in _records(tmp_path / node, node) if r["Type"] == "gpu"]
        assert {(r["Name"], r["Dimension"], r["Value"]) for r in gpu if r["Dimension"] == "GPUUtilization"} == {
            ("gpu0", "GPUUtilization", busy)}
    monitor = SystemMonitor(tmp_path / "none", "algo-3", 100, ())  # an instance given no GPU asks NVML nothing
    assert monitor._gpus is None
    monitor.stop()


# -- CPU: the instance's own processes -----------------------------------------------------------------------
SPIN = "import sys, time\nwhile time.process_time() < float(sys.argv[1]):\n    pass\n"
# The instance's root (its agent) whose child runs the work, then stays: the CPU used is the tree's.
ROOT = "import subprocess, sys, time\nsubprocess.run([sys.executable, sys.argv[1], sys.argv[2]])\ntime.sleep(60)\n"


@pytest.fixture
def instances(tmp_path):
    """Start `python ROOT SPIN seconds` processes (instances whose child spins for that much CPU time);
    killed with their children at the end."""
    (tmp_path / "spin.py").write_text(SPIN)
    (tmp_path / "root.py").write_text(ROOT)
    started = []

    def start(seconds: float) -> subprocess.Popen:
        started.append(subprocess.Popen([sys.executable, str(tmp_path / "root.py"), str(tmp_path / "spin.py"),
                                         str(seconds)]))
        return started[-1]

    yield start
    for process in started:
        for child in psutil.Process(process.pid).children(recursive=True):
            child.kill()
        process.kill()
        process.wait()


def _cpu(root, node: str) -> float:
    """The sum over the cores of the node's last CPUUtilization records (100: one core's worth)."""
    records = [r for r in _records(root, node) if r["Dimension"] == "CPUUtilization"]
    last = max(r["Timestamp"] for r in records)
    return sum(r["Value"] for r in records if r["Timestamp"] == last)


def test_each_instance_records_the_cpu_of_its_own_processes(tmp_path, instances):
    """Two instances on one machine, one busy (its agent's child spins), one idle: their CPU differs, where
    the machine's utilisation would show both alike."""
    busy, idle = instances(60), instances(0)
    monitors = {node: SystemMonitor(tmp_path / node, node, 100, pid=process.pid)
                for node, process in (("algo-1", busy), ("algo-2", idle))}
    time.sleep(1.5)
    for monitor in monitors.values():
        monitor.sample()
    busy_cpu, idle_cpu = _cpu(tmp_path / "algo-1", "algo-1"), _cpu(tmp_path / "algo-2", "algo-2")
    assert busy_cpu > 30 and idle_cpu < 10 and busy_cpu > idle_cpu + 25, (busy_cpu, idle_cpu)
    names = {r["Name"] for r in _records(tmp_path / "algo-1", "algo-1") if r["Type"] == "cpu"}
    assert names == {f"cpu{i}" for i in range(psutil.cpu_count())}  # per core, as SageMaker records them
    values = [r["Value"] for r in _records(tmp_path / "algo-1", "algo-1") if r["Dimension"] == "CPUUtilization"]
    assert all(0 <= v <= 100 for v in values)


def test_a_process_that_ended_between_samples_is_counted_once(instances):
    """The child spins for 1 s of CPU time and ends: counted, through its parent which reaped it, and not
    again for the part an earlier sample counted while it ran."""
    root = psutil.Process(instances(1.0).pid)
    cpu = ProcessTreeCPU(root.pid)
    started = time.monotonic()
    deadline = started + 30
    while time.monotonic() < deadline and not any(child.cpu_times().user > 0.3 for child in root.children()):
        time.sleep(0.05)
    used = []
    for _ in range(2):  # while it runs, then once it ended
        used.append(sum(cpu.sample()) / 100 * (time.monotonic() - started))
        started = time.monotonic()
        while root.children() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert 0.2 < used[0] < 1.0, used
    assert 0.9 < sum(used) < 1.3, used  # its 1 s and two interpreters' start, not 1 s + what was counted already
