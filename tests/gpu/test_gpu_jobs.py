"""What only a GPU can show, with real jobs through the SDK on local_gpu instances: GPUs split disjointly
between instances (plan and job agree), NCCL within and across instances, NVML metrics of each instance's
own GPUs with the GPU profiler rules and a CUDA trace, bf16/fp16 from shipyard.parallel, DeepSpeed ZeRO-2
on CUDA. `make gpu-check` runs them; without a usable GPU each skips saying why (conftest.py)."""

from __future__ import annotations

import glob
import importlib.util
import json
import math
import shutil
import tarfile
from pathlib import Path

import pytest

from shipyard.profiler import DetailedProfilingConfig, FrameworkProfile, ProfilerConfig, ProfilerRule, rule_configs
from shipyard.pytorch import PyTorch

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
SCRIPTS = Path(__file__).parent / "scripts"
DEEPSPEED_SCRIPT = Path(__file__).parents[1] / "e2e" / "scripts" / "deepspeed_train.py"
GPU_RULES = ("LowGPUUtilization", "GPUMemoryIncrease", "BatchSize", "LoadBalancing")


def _source(tmp_path: Path, script: Path) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(script, source / "train.py")
    return source


def _records(est: PyTorch) -> list[dict]:
    """The JSON files the ranks wrote to their model directories (every host's, merged), by rank."""
    with tarfile.open(est.model_data.removeprefix("file://")) as tar:
        records = [json.load(tar.extractfile(m)) for m in tar.getmembers() if m.isfile()]
    return sorted(records, key=lambda r: r["rank"])


def _planned_gpus(count: int) -> list[tuple[str, ...]]:
    """What backends/resources.py hands each of `count` local_gpu instances on this machine."""
    from shipyard.backends.resources import detect, plan_instances
    from shipyard.spec.catalog import get_instance_type

    return [res.gpus for res in plan_instances([(get_instance_type("local_gpu"), count)], detect())]


def _learned(losses: list[float]) -> bool:
    return all(math.isfinite(v) for v in losses) and sum(losses[-5:]) < sum(losses[:5]) / 2


def _check_nccl_ranks(records: list[dict], hosts_gpus: dict[str, tuple[str, ...]], per_host: int,
                      gpu_uuids: dict[str, str]) -> None:
    world = len(hosts_gpus) * per_host
    assert [r["rank"] for r in records] == list(range(world))
    for r in records:
        own = hosts_gpus[r["host"]]
        assert r["backend"] == "nccl" and r["world"] == world
        assert r["visible"] == ",".join(own) and r["num_gpus"] == len(own)
        assert r["device_count"] == len(own)  # the instance sees its own GPUs only
        assert r["device"] == f"cuda:{r['local_rank']}"
        # the physical GPU behind cuda:<local rank> is the one nvidia-smi numbers as the instance's <local rank>-th
        assert r["uuid"] == gpu_uuids[own[r["local_rank"]]]
        assert r["allreduce"] == world * (world + 1) / 2
        assert _learned(r["losses"])
        assert r["params"] == records[0]["params"]  # DDP kept every replica identical
    assert len({r["uuid"] for r in records}) == world  # one GPU per rank, none shared


@pytest.mark.gpu(count=2)
def test_two_local_gpu_instances_get_disjoint_gpus_and_ddp_over_nccl_across_them(home, tmp_path, gpu_uuids):
    planned = _planned_gpus(2)
    assert not set(planned[0]) & set(planned[1]) and all(planned)
    est = PyTorch(entry_point="train.py", source_dir=str(_source(tmp_path, SCRIPTS / "nccl_ddp.py")),
                  instance_count=2, instance_type="local_gpu", stop_grace_seconds=5,
                  distribution={"torch_distributed": {"enabled": True}})

    launches = est.plan()  # the dry run: each instance's GPUs, and torchrun with a process per GPU
    assert [launch.instance.host for launch in launches] == ["algo-1", "algo-2"]
    for launch, own in zip(launches, planned):
        assert launch.env["CUDA_VISIBLE_DEVICES"] == ",".join(own)
        assert launch.env["SM_NUM_GPUS"] == str(len(own))
        assert launch.argv[launch.argv.index("--nproc_per_node") + 1] == str(len(own))

    est.fit(logs=False)
    assert est.latest_training_job.describe()["TrainingJobStatus"] == "Completed"
    records = _records(est)
    _check_nccl_ranks(records, {"algo-1": planned[0], "algo-2": planned[1]}, len(planned[0]), gpu_uuids)
    assert [r["host"] for r in records] == ["algo-1"] * len(planned[0]) + ["algo-2"] * len(planned[1])


def test_one_local_gpu_instance_runs_nccl_on_its_gpus(home, tmp_path, gpus, gpu_uuids):
    per_host = min(2, len(gpus))  # NCCL wants a GPU per rank
    est = PyTorch(entry_point="train.py", source_dir=str(_source(tmp_path, SCRIPTS / "nccl_ddp.py")),
                  instance_count=1, instance_type="local_gpu", stop_grace_seconds=5,
                  distribution={"torch_distributed": {"enabled": True, "processes_per_host": per_host}})
    est.fit(logs=False)
    [own] = _planned_gpus(1)
    assert own == gpus  # a single local_gpu instance gets every GPU
    _check_nccl_ranks(_records(est), {"algo-1": own}, per_host, gpu_uuids)


def test_profiled_gpu_job_has_nvml_metrics_gpu_rules_and_cuda_kernels(home, tmp_path, gpus):
    from shipyard.rules.profiler.base import NO_GPU
    from shipyard.rules.profiler.data import ProfilerReader
    from tests.profiler.test_rules import evaluate

    count = min(2, len(gpus))  # with two, algo-2 stays idle: each instance must report its own GPUs
    planned = _planned_gpus(count)
    est = PyTorch(
        entry_point="train.py", source_dir=str(_source(tmp_path, SCRIPTS / "profiled_matmuls.py")),
        instance_count=count, instance_type="local_gpu", output_path=str(tmp_path / "out"), stop_grace_seconds=5,
        profiler_config=ProfilerConfig(
            system_monitor_interval_millis=100,
            framework_profile_params=FrameworkProfile(
                detailed_profiling_config=DetailedProfilingConfig(start_step=3, num_steps=2))),
        rules=[ProfilerRule.sagemaker(getattr(rule_configs, name)()) for name in (*GPU_RULES, "OverallFrameworkMetrics")],
    )
    est.fit(logs=False)
    job = est.latest_training_job
    statuses = {s["RuleConfigurationName"]: s for s in job.describe()["ProfilerRuleEvaluationStatuses"]}
    for name in (*GPU_RULES, "OverallFrameworkMetrics"):
        assert statuses[name]["RuleEvaluationStatus"] in ("NoIssuesFound", "IssuesFound"), statuses[name]
    for name in GPU_RULES:
        assert NO_GPU not in statuses[name]["StatusDetails"], statuses[name]  # they saw the GPU metrics

    root = tmp_path / "out" / job.name / "profiler-output"
    data = ProfilerReader(str(root)).read()
    peaks = {}
    for host, own in zip(("algo-1", "algo-2"), planned):
        utilisation = data.series(host, "gpu", "GPUUtilization")
        memory = data.series(host, "gpu", "GPUMemoryUtilization")
        names = {f"gpu{i}" for i in range(len(own))}  # named as the instance sees them
        assert set(utilisation) == names and set(memory) == names, (host, own)
        peaks[host] = max(v for points in utilisation.values() for _, v in points)
    assert peaks["algo-1"] > 0
    assert max(v for _, v in data.series("algo-1", "gpu", "GPUMemoryUtilization")["gpu0"]) > 0
    if count == 2:
        assert peaks["algo-2"] < 10 < peaks["algo-1"], peaks  # algo-2's GPUs idle, not algo-1's busy one
    assert evaluate("LowGPUUtilization", data).stats["algo-1/gpu0"]["p95"] > 0

    # The detailed trace of steps 3-4 has CUDA kernels, which OverallFrameworkMetrics counts as GPU time.
    [trace] = glob.glob(f"{root}/framework/pytorch/detailed_profiling/*/000000003/algo-1-rank0.pt.trace.json")
    kernels = [e for e in json.load(open(trace))["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels, "no CUDA kernel in the detailed trace"
    operators = evaluate("OverallFrameworkMetrics", data).stats["algo-1"]["operators"]
    assert operators["gpu"] > 0 and operators["top"]["GPU"]
    assert "detailed trace(s)" in statuses["OverallFrameworkMetrics"]["StatusDetails"]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_from_the_job_config_runs_on_the_gpu(home, tmp_path, gpus, precision):
    processes = min(2, len(gpus))
    est = PyTorch(entry_point="train.py", source_dir=str(_source(tmp_path, SCRIPTS / "mixed_precision.py")),
                  instance_count=1, instance_type="local_gpu", stop_grace_seconds=5,
                  distribution={"smdistributed": {"modelparallel": {"enabled": True, "parameters": {precision: True}}},
                                "torch_distributed": {"enabled": True, "processes_per_host": processes}})
    est.fit(logs=False)
    records = _records(est)
    dtype = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}[precision]
    assert [r["rank"] for r in records] == list(range(processes))
    for r in records:
        assert r["backend"] == "nccl" and r["device"] == f"cuda:{r['rank']}"  # auto picks NCCL on a GPU
        assert r["strategies"] == (["ddp"] if processes > 1 else []) + ["mixed_precision"]
        assert r["outputs"] == [[dtype, "cuda"]]  # the forward ran in low precision on the GPU
        assert r["param_dtypes"] == ["torch.float32"]
        assert _learned(r["losses"])
        if precision == "bf16":
            assert r["scales"] == [] and r["growth_tracker"] is None  # bf16 needs no loss scaling
            continue
        # The scaler updated after every step: its growth tracker counts the steps since it last skipped one.
        scales = [65536.0] + r["scales"]  # GradScaler's initial scale first
        skipped = [i for i in range(1, len(scales)) if scales[i] < scales[i - 1]]
        assert r["growth_tracker"] == len(r["scales"]) - (skipped[-1] if skipped else 0) > 0, r["scales"]


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed not installed")
def test_deepspeed_zero2_on_cuda_with_nccl(home, tmp_path, gpus):
    count = min(2, len(gpus))  # across two instances where there are two GPUs
    est = PyTorch(entry_point="train.py", source_dir=str(_source(tmp_path, DEEPSPEED_SCRIPT)),
                  instance_count=count, instance_type="local_gpu", stop_grace_seconds=5,
                  distribution={"torch_distributed": {"enabled": True, "processes_per_host": 1}},
                  hyperparameters={"zero_stage": 2, "steps": 40})
    est.fit(logs=False)
    records = _records(est)
    assert [(r["rank"], r["world"], r["host"]) for r in records] == [
        (i, count, f"algo-{i + 1}") for i in range(count)]
    for r in records:
        assert r["zero_stage"] == 2 and r["backend"] == "nccl" and r["device"] == "cuda:0"
        assert _learned(r["losses"])
        assert r["params"] == records[0]["params"]
