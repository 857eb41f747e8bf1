"""The planner: every instance type of the catalog with accelerators like the baseline's, at 1 to
`max_instances` instances, on demand and (when interruptions are acceptable) spot; for each, the
cheapest-to-run strategy whose memory fits, its input mode, predicted hours, cost and chance of missing
the deadline (planner/models.py); ranked, with the reason the first is first. docs/planner.md has the
formulas, their sources and worked numbers."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from shipyard.errors import ValidationError
from shipyard.planner import models
from shipyard.planner.models import GB, Strategy
from shipyard.planner.request import PlanRequest
from shipyard.spec.catalog import InstanceType, load_catalog

COUNTS = (1, 2, 4, 8, 16, 32, 64, 128)
# An accelerator's memory the model may use: the rest goes to the CUDA context, the allocator's
# fragmentation and the framework's buffers.
USABLE_MEMORY = 0.9
GIB = 2**30
# The planner's own error without a calibration run (its goal: within 20 % of the real wall time, so
# one standard deviation is taken as 10 %).
PREDICTION_SPREAD = 0.10
# A spot interruption costs, besides the work since the last checkpoint (half the interval on average),
# getting capacity again and restoring the checkpoint.
RESTART_HOURS = 5 / 60
# File mode copies each instance's share before training: the planner takes it when that is small against
# the training and small in itself (past about 50 GB per instance SageMaker's guidance is to stream, and
# the copy needs a volume that large per instance); else FastFile, when streaming keeps up.
FILE_MODE_SHARE = 0.05
FILE_MODE_MAX_BYTES = 50e9
# A deadline with more risk than this is not met; a hard one allows much less.
MEETS_RISK, HARD_RISK = 0.2, 0.01


@dataclass(frozen=True)
class Option:
    strategy: str
    instance_type: str
    instance_count: int
    spot: bool
    input_mode: str
    hours: float
    cost: float
    memory_per_accelerator_gb: float | None
    meets_deadline: bool
    deadline_risk: float
    distribution: dict = field(default_factory=dict)   # the estimator's distribution= for this strategy
    s3_data_distribution: str = "FullyReplicated"
    accelerators: int = 0
    accelerator_tflops: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Plan:
    options: list[Option]
    why: str
    calibration: dict | None = None   # what --calibrate measured (sdk/calibrate.py Calibration)

    def to_dict(self) -> dict:
        return {"options": [o.to_dict() for o in self.options], "why": self.why,
                **({"calibration": self.calibration} if self.calibration else {})}


def strategies(gpus_per_instance: int, instances: int) -> list[Strategy]:
    """In order of what they cost to run: the first whose memory fits is the one chosen."""
    found = [Strategy("ddp"), Strategy("zero1", shard=1), Strategy("fsdp", shard=3),
             Strategy("fsdp+activation_checkpointing", shard=3, checkpointing=True)]
    if gpus_per_instance > 1:
        found.append(Strategy(f"tensor_parallel({gpus_per_instance})+fsdp+activation_checkpointing", shard=3,
                              tensor=gpus_per_instance, checkpointing=True))
        for stages in (2, 4, 8):
            if instances % stages == 0 and instances > 1:
                found.append(Strategy(f"tensor_parallel({gpus_per_instance})+pipeline({stages})+fsdp"
                                      "+activation_checkpointing", shard=3, tensor=gpus_per_instance,
                                      pipeline=stages, checkpointing=True))
    found.append(Strategy("fsdp+activation_checkpointing+activation_offloading", shard=3, checkpointing=True,
                          offload=True))
    return found


def distribution(strategy: Strategy, data_parallel: int) -> dict:
    """The estimator's `distribution=` that runs `strategy` with shipyard.parallel (docs/parallel/)."""
    if strategy == Strategy(strategy.name):   # nothing split: plain data parallelism
        return {"torch_distributed": {"enabled": True}}
    parameters: dict = {"bf16": True}
    if strategy.shard == 1:
        parameters["shard_optimizer_state"] = True
    if strategy.shard == 3:
        parameters["hybrid_shard_degree"] = data_parallel
    if strategy.tensor > 1:
        parameters["tensor_parallel_degree"] = strategy.tensor
    if strategy.pipeline > 1:
        parameters["pipeline_parallel_degree"] = strategy.pipeline
    if strategy.checkpointing:
        parameters["activation_checkpointing"] = True
    if strategy.offload:
        parameters["sm_activation_offloading"] = True
    return {"smdistributed": {"modelparallel": {"enabled": True, "parameters": parameters}}}


def _speed(kind: InstanceType, baseline: InstanceType) -> float | None:
    """One instance's speed per accelerator, comparable with the baseline's: TFLOPS for GPU types, vCPUs
    for CPU types. None: not comparable (a CPU type against a GPU baseline, a type without figures)."""
    if baseline.gpus:
        return kind.gpu_tflops if kind.gpus and kind.gpu_tflops else None
    return float(kind.vcpus) if not kind.gpus and kind.vcpus else None


def _accelerators(kind: InstanceType) -> int:
    return kind.gpus or 1   # a CPU instance is one "accelerator" of `vcpus` speed


def _memory_gib(kind: InstanceType) -> float | None:
    """What one accelerator holds: a GPU's memory, or a CPU instance's."""
    return kind.gpu_memory_gib if kind.gpus else kind.memory_gib


def assumed_parameters(request: PlanRequest, baseline: InstanceType) -> float | None:
    """Without a model size: the largest model the baseline's accelerator trains with plain DDP (its
    usable memory less the activations, at the optimizer's bytes per parameter), so that gradients have
    a size to synchronise. An upper bound: give --parameters for a closer plan."""
    if request.parameters is not None or not _memory_gib(baseline):
        return request.parameters
    usable = _memory_gib(baseline) * GIB * USABLE_MEMORY - request.activation_bytes
    return max(usable, 0) / models.state_bytes_per_device(1, Strategy("ddp"), 1, request.dtype, request.optimizer)


def evaluate(request: PlanRequest, kind: InstanceType, count: int, spot: bool,
             baseline: InstanceType) -> Option | None:
    """The option of `count` instances of `kind`, or None when no strategy fits its memory."""
    speed, base_speed = _speed(kind, baseline), _speed(baseline, baseline)
    per_instance = _accelerators(kind)
    accelerators = per_instance * count
    step_seconds = request.step_seconds
    steps = request.baseline_hours * 3600 / step_seconds
    network = (kind.network_gbps or 10) * 1e9 / 8
    link = (kind.gpu_link_gbytes_per_s or models.PCIE_BYTES_PER_S / GB) * GB
    usable = (_memory_gib(kind) or 0) * GIB * USABLE_MEMORY
    for strategy in strategies(per_instance if kind.gpus else 1, count):
        if strategy.tensor > per_instance or (strategy.pipeline > 1 and count % strategy.pipeline):
            continue
        data_parallel = accelerators // (strategy.tensor * strategy.pipeline)
        memory = None
        if request.parameters is not None and _memory_gib(kind):
            memory = (models.state_bytes_per_device(request.parameters, strategy, data_parallel, request.dtype,
                                                    request.optimizer)
                      + models.activation_bytes_per_device(request.activation_bytes, strategy))
            if memory > usable * (1 + 1e-9):
                continue
        compute = (step_seconds * _accelerators(baseline) * base_speed / (accelerators * speed)
                   * (models.RECOMPUTE_FACTOR if strategy.checkpointing else 1.0)
                   / (1 - models.pipeline_bubble(strategy.pipeline))
                   * (1 + models.tensor_parallel_overhead(strategy.tensor, link)))
        gradient_bytes = models.WEIGHT_BYTES[request.dtype] * (request.parameters or 0) / (
            strategy.tensor * strategy.pipeline)
        communication = models.gradient_sync_seconds(
            gradient_bytes, per_instance // strategy.tensor if kind.gpus else 1, count // strategy.pipeline,
            link, network, volume=1.5 if strategy.shard == 3 else 1.0)
        step = (models.step_seconds(compute, communication)
                + models.offload_seconds(request.activation_bytes, strategy))
        train_hours = steps * step / 3600
        input_mode, sharding, data_hours = _input(request, network, count, train_hours)
        return _option(request, kind, count, spot, strategy, data_hours + train_hours, input_mode, sharding, memory,
                       data_parallel)
    return None


def _option(request: PlanRequest, kind: InstanceType, count: int, spot: bool, strategy: Strategy, hours: float,
            input_mode: str, sharding: str, memory: float | None, data_parallel: int) -> Option:
    """An option that takes `hours` without interruptions: with spot's expected interruptions (each
    losing the work since the last checkpoint and a restart), its cost and its deadline risk."""
    interruptions = count * kind.spot_interruptions_per_hour if spot else 0.0
    lost = RESTART_HOURS + (request.checkpoint_minutes / 120 if request.checkpoint_minutes else hours / 2)
    expected = hours + interruptions * hours * lost
    price = kind.spot_usd_per_hour if spot else kind.on_demand_usd_per_hour
    risk = models.deadline_risk(hours, request.deadline_hours, PREDICTION_SPREAD, interruptions, lost)
    return Option(
        strategy=strategy.name, instance_type=kind.name, instance_count=count, spot=spot,
        input_mode=input_mode, hours=round(expected, 4), cost=round(expected * count * price, 2),
        memory_per_accelerator_gb=round(memory / GB, 1) if memory is not None else None,
        meets_deadline=risk <= (HARD_RISK if request.hard_deadline else MEETS_RISK),
        deadline_risk=round(risk, 4), distribution=distribution(strategy, data_parallel),
        s3_data_distribution=sharding, accelerators=_accelerators(kind) * count, accelerator_tflops=kind.gpu_tflops)


def _input(request: PlanRequest, network: float, count: int, train_hours: float) -> tuple[str, str, float]:
    """(input mode, S3 data distribution, hours before training). File mode when its download is small
    against the training (sharded over the instances: data parallelism reads each sample once per epoch
    somewhere); else FastFile, streaming the shard while it trains, as long as the network keeps up."""
    if request.dataset_bytes is None:
        return "File", "FullyReplicated", 0.0
    sharding = "ShardedByS3Key" if count > 1 else "FullyReplicated"
    reading = min(network, models.S3_BYTES_PER_S)
    share = request.dataset_bytes / count
    download = models.download_seconds(share, reading) / 3600
    if download <= FILE_MODE_SHARE * train_hours and share <= FILE_MODE_MAX_BYTES:
        return "File", sharding, download
    streaming = share * request.epochs / reading / 3600   # hours of reading at full speed
    if streaming - train_hours < download:
        return "FastFile", sharding, max(0.0, streaming - train_hours)   # waits when reading is the slower
    return "File", sharding, download


def calibrated(request: PlanRequest, kind: InstanceType) -> list[Option]:
    """The calibrated type at each count, from its measured steps (models.calibrated_seconds)."""
    measured = request.calibration
    one, two = ({m["instances"]: m for m in measured["measures"]}[n] for n in (1, 2))
    options = []
    for count in (c for c in COUNTS if c <= request.max_instances):
        seconds = models.calibrated_seconds(count, request.steps, one, two, measured["threads"], measured["cores"])
        network = (kind.network_gbps or 10) * 1e9 / 8
        input_mode, sharding, data_hours = _input(request, network, count, seconds / 3600)
        for spot in ((False, True) if request.interruptions_ok and kind.spot_usd_per_hour else (False,)):
            options.append(_option(request, kind, count, spot, Strategy("ddp (calibrated)"), data_hours + seconds / 3600,
                                   input_mode, sharding, None, count))
    return options


def plan(request: PlanRequest, catalog: dict[str, InstanceType] | None = None) -> Plan:
    catalog = catalog if catalog is not None else load_catalog()
    baseline = catalog[request.baseline_instance_type]
    options = calibrated(request, baseline) if request.calibration is not None else []
    if _speed(baseline, baseline) is None:
        if not options:
            raise ValidationError("baseline", baseline.name, "the catalog has no speed figure for it (gpu_tflops); "
                                  "add one in $SHIPYARD_HOME/instance_types.yaml or take another baseline type")
        return _ranked(options, request)
    if request.parameters is None:
        request = request.model_copy(update={"parameters": assumed_parameters(request, baseline)})
    if request.step_seconds is None:   # a CPU baseline has no FLOPS figure: a step of a second
        request = request.model_copy(update={"step_seconds": models.default_step_seconds(
            request.parameters, request.tokens_per_accelerator, baseline.gpu_tflops) if baseline.gpus else 1.0})
    for kind in catalog.values():
        if kind.name.startswith("local") or _speed(kind, baseline) is None or (
                request.calibration is not None and kind.name == baseline.name):   # measured instead
            continue
        for count in (c for c in COUNTS if c <= request.max_instances):
            for spot in ((False, True) if request.interruptions_ok and kind.spot_usd_per_hour else (False,)):
                option = evaluate(request, kind, count, spot, baseline)
                if option is not None:
                    options.append(option)
    if not options:
        raise ValidationError("parameters", request.parameters, "no instance type in the catalog fits this model "
                              f"with up to {request.max_instances} instances; raise --max-instances")
    return _ranked(options, request)


def _ranked(options: list[Option], request: PlanRequest) -> Plan:
    ranked = sorted(options, key=lambda o: _rank(o, request))
    affordable = [o for o in ranked if request.budget is None or o.cost <= request.budget]
    if not affordable:
        cheapest = min((o for o in ranked if o.meets_deadline), key=lambda o: o.cost, default=ranked[0])
        raise ValidationError("budget", request.budget, f"no option costs that little: the cheapest that meets "
                              f"the deadline is {_name(cheapest)} at ${cheapest.cost:,.2f} "
                              f"({cheapest.hours:.1f} h); raise the budget or relax the deadline")
    return Plan(affordable, why(affordable, request), request.calibration)


def _rank(option: Option, request: PlanRequest) -> tuple:
    """Meeting the deadline first; with a hard deadline on-demand before spot (no interruption risk
    is worth taking); then the cheapest, then the fastest."""
    spot_last = option.spot if request.hard_deadline else False
    return (not option.meets_deadline, spot_last, option.cost, option.hours)


def _name(option: Option) -> str:
    how = "spot" if option.spot else "on demand"
    return f"{option.instance_count} x {option.instance_type} ({option.strategy}, {how}, {option.input_mode})"


def why(options: list[Option], request: PlanRequest) -> str:
    """One sentence: why the first option is first."""
    first = options[0]
    if not first.meets_deadline:
        return (f"No option meets the {request.deadline_hours:g} h deadline; {_name(first)} is the cheapest of "
                f"the fastest kind, at {first.hours:.1f} h and ${first.cost:,.2f}.")
    reason = (f"{_name(first)} is first: it meets the {request.deadline_hours:g} h deadline "
              f"({first.hours:.1f} h, {first.deadline_risk:.0%} risk) at the lowest cost, ${first.cost:,.2f}")
    if request.hard_deadline and first.spot:
        reason += ", on spot although the deadline is hard: no on-demand option that meets it is within the budget"
    elif request.hard_deadline:
        reason += ", on demand because a hard deadline cannot take spot interruptions"
    elif first.spot:
        reason += ", on spot because cost is the aim and its interruption risk still meets the deadline"
    smaller = [o for o in options if o.accelerators == first.accelerators and o.instance_count > first.instance_count
               and o.accelerator_tflops == first.accelerator_tflops and o.spot == first.spot
               and o.hours > first.hours]
    if smaller:
        other = min(smaller, key=lambda o: o.hours)
        reason += (f"; one larger instance beats {other.instance_count} smaller ones ({other.instance_type}, "
                   f"{other.hours:.1f} h) because its accelerators talk over their own fast link, not the network")
    return reason + "."
