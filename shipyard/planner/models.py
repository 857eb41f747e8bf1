"""The planner's explicit models, each a formula with its source (docs/planner.md says the same with
worked numbers). Pure functions of numbers: the planner (planner/plan.py) feeds them the request and the
catalog's figures.

Units: bytes, seconds, hours as named; bandwidths in bytes per second."""

from __future__ import annotations

import math
from dataclasses import dataclass

GB = 1e9

# Bytes per parameter kept on the devices for training (ZeRO, Rajbhandari et al. 2020, section 3.1):
# mixed precision keeps 16-bit weights (2) and gradients (2); Adam adds fp32 master weights, momentum
# and variance (4 + 4 + 4 = 12: "K = 12"); SGD with momentum fp32 master weights and momentum (8).
# In fp32 training weights and gradients are 4 bytes each and the optimizer keeps no master copy.
WEIGHT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
OPTIMIZER_BYTES = {("adam", True): 12, ("adam", False): 8, ("sgd", True): 8, ("sgd", False): 4}


@dataclass(frozen=True)
class Strategy:
    """How the model state is split, as shipyard.parallel runs it (docs/parallel/). `shard`: ZeRO stage
    (0 none: DDP; 1 optimizer states: shard_optimizer_state; 3 weights, gradients and optimizer states:
    FSDP); `tensor`, `pipeline`: model-parallel degrees; `checkpointing`: activation checkpointing;
    `offload`: activations kept in host memory (sm_activation_offloading)."""

    name: str
    shard: int = 0
    tensor: int = 1
    pipeline: int = 1
    checkpointing: bool = False
    offload: bool = False


def state_bytes_per_device(parameters: float, strategy: Strategy, data_parallel: int, dtype: str,
                           optimizer: str) -> float:
    """Weights + gradients + optimizer states on one accelerator (ZeRO's 2Ψ + 2Ψ + KΨ): stage 1 divides
    the optimizer states by the data-parallel degree, stage 3 every term; tensor x pipeline divide all."""
    mixed = dtype in ("bf16", "fp16")
    per_model = parameters / (strategy.tensor * strategy.pipeline)
    weights = WEIGHT_BYTES[dtype] * per_model
    grads = WEIGHT_BYTES[dtype] * per_model
    states = OPTIMIZER_BYTES[(optimizer, mixed)] * per_model
    if strategy.shard >= 1:
        states /= data_parallel
    if strategy.shard >= 3:
        grads /= data_parallel
        weights /= data_parallel
    return weights + grads + states


# Activation checkpointing keeps one input per layer and recomputes the rest in backward: memory down to
# about this share, compute up by one more forward (forward is 1/3 of a step: +1/3). Korthikanti et al.
# 2022 ("Reducing Activation Recomputation in Large Transformer Models"), full recomputation.
CHECKPOINTED_ACTIVATIONS = 0.2
RECOMPUTE_FACTOR = 4 / 3
# Offloaded activations stay on the device only for the layers within the loading horizon (SageMaker
# model parallel's activation_loading_horizon, default 4, of a few dozen layers): taken as 0.1.
OFFLOADED_ACTIVATIONS = 0.1


def activation_bytes_per_device(activation_bytes: float, strategy: Strategy) -> float:
    """`activation_bytes`: one accelerator's activations for its micro-batch, unsplit (given, or a
    default: docs/planner.md). Tensor and pipeline parallelism split them by their degree."""
    share = activation_bytes / (strategy.tensor * strategy.pipeline)
    if strategy.checkpointing:
        share *= CHECKPOINTED_ACTIVATIONS
    return share * (OFFLOADED_ACTIVATIONS if strategy.offload else 1.0)


def ring_allreduce_seconds(size: float, members: int, bandwidth: float) -> float:
    """Ring all-reduce of `size` bytes over `members` peers, each link `bandwidth` bytes/s: every peer
    sends and receives 2(n-1)/n of the data (Patarasuk & Yuan 2009; NCCL's bus bandwidth formula)."""
    if members <= 1:
        return 0.0
    return 2 * (members - 1) / members * size / bandwidth


def gradient_sync_seconds(gradient_bytes: float, gpus_per_instance: int, instances: int,
                          link_bytes_per_s: float, network_bytes_per_s: float, volume: float = 1.0) -> float:
    """Hierarchical all-reduce (NCCL's tree/ring over nodes): among an instance's GPUs over its GPU link,
    then among instances over the network. `volume`: ZeRO-3/FSDP moves 1.5x DDP's bytes (ZeRO section
    7: 3Ψ against 2Ψ); stage 1 moves what DDP does."""
    inside = ring_allreduce_seconds(gradient_bytes, gpus_per_instance, link_bytes_per_s)
    across = ring_allreduce_seconds(gradient_bytes, instances, network_bytes_per_s)
    return volume * (inside + across)


# DDP and FSDP overlap the gradient traffic with the backward pass (PyTorch DDP paper, Li et al. 2020):
# backward is 2/3 of a step's compute (Kaplan et al. 2020: forward 2N, backward 4N FLOPs per token).
BACKWARD_SHARE = 2 / 3


def step_seconds(compute: float, communication: float) -> float:
    """A step: its compute, plus the communication the backward pass cannot hide."""
    return compute + max(0.0, communication - BACKWARD_SHARE * compute)


# Offloaded activations go to host memory in forward and come back in backward over PCIe (Gen3 x16's
# 16 GB/s taken for every type), not hidden behind compute (conservative).
PCIE_BYTES_PER_S = 16 * GB


def offload_seconds(activation_bytes: float, strategy: Strategy) -> float:
    if not strategy.offload:
        return 0.0
    kept = activation_bytes_per_device(activation_bytes, Strategy("", tensor=strategy.tensor,
                                                                  pipeline=strategy.pipeline,
                                                                  checkpointing=strategy.checkpointing))
    return 2 * kept / PCIE_BYTES_PER_S


# A pipeline of p stages with m micro-batches idles (p-1)/(m+p-1) of the time (GPipe, Huang et al. 2019);
# the planner takes m = 4p, so the bubble is (p-1)/(5p-1).
def pipeline_bubble(stages: int) -> float:
    return (stages - 1) / (5 * stages - 1) if stages > 1 else 0.0


# Tensor parallelism inside an instance: 4 all-reduces of the layer's activations per layer and step
# (Megatron-LM, Shoeybi et al. 2019); taken here as this share of the step's compute at NVLink speed,
# scaled by how much slower the instance's GPU link is than NVLink 3 (300 GB/s).
TENSOR_PARALLEL_OVERHEAD = 0.1
NVLINK_BYTES_PER_S = 300 * GB


def tensor_parallel_overhead(degree: int, link_bytes_per_s: float) -> float:
    if degree <= 1:
        return 0.0
    return TENSOR_PARALLEL_OVERHEAD * NVLINK_BYTES_PER_S / link_bytes_per_s


# Without a measured step time: a transformer's training step costs 6 FLOPs per parameter and token
# (Kaplan et al. 2020), run at 40 % of the accelerator's peak (model FLOPs utilisation: PaLM, Chowdhery
# et al. 2022, reports 46 %; 40 % leaves room for a less tuned script).
FLOPS_PER_PARAMETER_TOKEN = 6
MODEL_FLOPS_UTILISATION = 0.4


def default_step_seconds(parameters: float, tokens_per_accelerator: float, tflops: float) -> float:
    return FLOPS_PER_PARAMETER_TOKEN * parameters * tokens_per_accelerator / (tflops * 1e12 * MODEL_FLOPS_UTILISATION)


# What one instance reads from S3: AWS's S3 performance guidelines give up to 100 Gb/s per instance with
# many parallel requests; SageMaker's File mode and FastFile reach about a quarter of that.
S3_BYTES_PER_S = 25e9 / 8


def download_seconds(dataset_bytes: float, network_bytes_per_s: float, share: float = 1.0) -> float:
    """File mode copies the channel before the script starts: `share` of it per instance (1 when fully
    replicated, 1/N with ShardedByS3Key), at the instance's network bandwidth."""
    return dataset_bytes * share / network_bytes_per_s


def poisson_cdf(k: int, mean: float) -> float:
    """P(K <= k) for K ~ Poisson(mean)."""
    if k < 0:
        return 0.0
    term = total = math.exp(-mean)
    for i in range(1, k + 1):
        term *= mean / i
        total += term
    return min(total, 1.0)


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2))


def deadline_risk(hours: float, deadline_hours: float, spread: float, interruptions_per_hour: float = 0.0,
                  lost_hours_per_interruption: float = 0.0) -> float:
    """The chance of missing the deadline. The prediction itself is taken as normal around `hours` with a
    standard deviation of `spread` x hours (the planner's own error: docs/planner.md); spot interruptions
    arrive as a Poisson process over the run at `interruptions_per_hour` (the whole job's), each costing
    `lost_hours_per_interruption` (the work since the last checkpoint and the restart)."""
    sigma = max(spread * hours, 1e-9)
    mean = interruptions_per_hour * hours
    if mean <= 0 or lost_hours_per_interruption <= 0:
        return normal_sf((deadline_hours - hours) / sigma)
    risk, seen, k = 0.0, 0.0, 0
    while seen < 1 - 1e-9 and k < 1000:
        p_k = poisson_cdf(k, mean) - seen
        seen += p_k
        risk += p_k * normal_sf((deadline_hours - hours - k * lost_hours_per_interruption) / sigma)
        k += 1
    return min(risk + (1 - seen), 1.0)


# -- the calibrated model: a job's own steps measured on 1 and 2 instances of its type (sdk/calibrate.py)
def contention(instances: int, threads: int, cores: int) -> float:
    """Instances of one machine share its cores: n instances of `threads` threads each on `cores` cores
    run a step's compute max(1, n x threads / cores) times slower than one with the cores to itself."""
    return max(1.0, instances * threads / cores)


def calibrated_step(instances: int, one: float, two: float, threads: int, cores: int) -> float:
    """A step on n instances from the steps measured on 1 (`one`) and 2 (`two`): the compute measured on
    one instance, stretched by contention; plus the gradient exchange, what the second instance added
    beyond its contention, scaled to n as a ring all-reduce's 2(n-1)/n (1 at n = 2) and by contention
    too (on a shared machine the exchange is CPU work as well)."""
    k1, k2, kn = (contention(n, threads, cores) for n in (1, 2, instances))
    exchange = max(0.0, two - one * k2 / k1)
    return one * kn / k1 + (exchange * 2 * (instances - 1) / instances * kn / k2 if instances > 1 else 0.0)


def calibrated_seconds(instances: int, steps: float, one: dict, two: dict, threads: int, cores: int) -> float:
    """The job's wall time on n instances from its measures on 1 and 2 (sdk/calibrate.py Measure's
    fields): the start (submission to the first step, growing by what the second instance added), its
    steps shared by the instances (data parallel: each rank reads 1/n of the data at its own batch
    size), and the end (from the end of training to the job's end)."""
    # Starting is CPU work too (each instance's interpreter and framework imports): what the second
    # instance added grows with each one more, stretched by contention.
    k2, kn = contention(2, threads, cores), contention(instances, threads, cores)
    start = one["start_seconds"] + (two["start_seconds"] - one["start_seconds"]) * (instances - 1) * kn / k2
    step = calibrated_step(instances, one["step_seconds"], two["step_seconds"], threads, cores)
    return start + steps / instances * step + (one["end_seconds"] + two["end_seconds"]) / 2
