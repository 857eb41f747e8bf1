"""`distribution={"smdistributed": {...}}`: the options SageMaker's SDK accepts, validated as it validates
them, and the hyperparameters it emits (spec sections 2.1 and 2.7). The `parameters` of `modelparallel`
reach the script as `mp_parameters` and are what `shipyard.parallel` reads, so their one definition is
here, where both the SDK side and the library import it (torch-free).

Names are SageMaker model parallel (SMP) v2's where v2 has one, else v1's; three are shipyard's own
(`activation_checkpointing`, `gradient_accumulation_steps`, and `hybrid_shard_degree` accepting the v1
alias `sharded_data_parallel_degree`). See docs/parallel/README.md for where we differ."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shipyard.errors import ValidationError, unknown_name_error


@dataclass(frozen=True)
class Parameter:
    kind: type                                   # bool or int or str
    minimum: int | None = None                   # for int
    choices: tuple[str, ...] = ()                # for str
    help: str = ""

    def check(self, field: str, value: Any) -> None:
        if self.kind is bool:
            if not isinstance(value, bool):
                raise ValidationError(field, value, "must be true or false")
        elif self.kind is int:
            if not isinstance(value, int) or isinstance(value, bool) or value < (self.minimum or 0):
                raise ValidationError(field, value, f"must be an integer >= {self.minimum or 0}")
        elif value not in self.choices:
            raise ValidationError(field, value, f"must be one of {', '.join(self.choices)}")


PARAMETERS: dict[str, Parameter] = {
    # data parallelism and sharding
    "ddp": Parameter(bool, help="replicate the model, all-reduce gradients (the default with >1 rank)"),
    "shard_optimizer_state": Parameter(bool, help="ZeRO-1: shard optimizer state across data-parallel ranks"),
    "hybrid_shard_degree": Parameter(int, 0, help="FSDP: shard parameters, gradients and optimizer state "
                                                  "across groups of this many ranks (0: off)"),
    "sharded_data_parallel_degree": Parameter(int, 0, help="SMP v1 name of hybrid_shard_degree"),
    "ddp_dist_backend": Parameter(str, choices=("auto", "gloo", "nccl"), help="process group backend"),
    # model parallelism
    "tensor_parallel_degree": Parameter(int, 1, help="split Linear layers across this many ranks"),
    "pipeline_parallel_degree": Parameter(int, 1, help="pipeline stages (one per rank)"),
    "partitions": Parameter(int, 1, help="SMP v1 name of pipeline_parallel_degree"),
    "microbatches": Parameter(int, 1, help="micro-batches per pipeline step"),
    "pipeline": Parameter(str, choices=("interleaved", "simple"), help="1F1B or GPipe schedule"),
    # SMP v1's partitioning: shipyard cuts an nn.Sequential into equal runs of layers, which is automatic
    # partitioning; manual placement (auto_partition false with smp.partition) is refused in check_combination.
    "auto_partition": Parameter(bool, help="SMP v1: place layers on stages automatically (must stay true)"),
    "default_partition": Parameter(int, 0, help="SMP v1: the stage of modules outside smp.partition; "
                                              "with auto_partition only accepted"),
    "optimize": Parameter(str, choices=("speed", "memory"),
                          help="SMP v1: the goal of its partitioning heuristic; equal runs of layers for both"),
    "placement_strategy": Parameter(str, choices=("cluster", "spread"),
                                    help="model-parallel groups on neighbouring ranks, or spread out"),
    # memory and numerics
    "activation_checkpointing": Parameter(bool, help="recompute each layer's activations in backward"),
    "sm_activation_offloading": Parameter(bool, help="keep saved activations in CPU memory"),
    "offload_activations": Parameter(bool, help="SMP v1 name of sm_activation_offloading"),
    "activation_loading_horizon": Parameter(int, 1, help="accepted for compatibility; no prefetching"),
    "bf16": Parameter(bool, help="bfloat16 autocast"),
    "fp16": Parameter(bool, help="float16 autocast with dynamic loss scaling"),
    "gradient_accumulation_steps": Parameter(int, 1, help="optimizer step every k micro-batches"),
}

# alias -> the name shipyard.parallel reads
ALIASES = {"sharded_data_parallel_degree": "hybrid_shard_degree", "partitions": "pipeline_parallel_degree",
           "offload_activations": "sm_activation_offloading"}

DATAPARALLEL_OPTIONS = frozenset({"enabled", "custom_mpi_options"})
MODELPARALLEL_OPTIONS = frozenset({"enabled", "parameters"})


def check_parameters(parameters: Any, field: str = "mp_parameters") -> dict[str, Any]:
    """Validate modelparallel `parameters`; return them with aliases replaced by the names we read."""
    if not isinstance(parameters, dict):
        raise ValidationError(field, parameters, "must be a dict such as {'hybrid_shard_degree': 2}")
    canonical: dict[str, Any] = {}
    for name, value in parameters.items():
        if name not in PARAMETERS:
            raise unknown_name_error(field, name, PARAMETERS)
        PARAMETERS[name].check(f"{field}.{name}", value)
        key = ALIASES.get(name, name)
        if key in canonical and canonical[key] != value:
            raise ValidationError(f"{field}.{name}", value, f"conflicts with {key}={canonical[key]!r}; give one")
        canonical[key] = value
    check_combination(canonical, field)
    return canonical


def check_combination(p: dict[str, Any], field: str) -> None:
    """Parameters that cannot be used together (canonical names)."""
    def refuse(name: str, fix: str) -> None:
        raise ValidationError(f"{field}.{name}", p[name], fix)

    if p.get("auto_partition") is False:
        refuse("auto_partition", "manual partitioning (smp.partition) is not served; remove it or set it to true "
                                 "(layers are cut into equal runs per stage)")
    if p.get("bf16") and p.get("fp16"):
        refuse("fp16", "cannot be true together with bf16; choose one")
    sharded = p.get("hybrid_shard_degree", 0) > 0
    if sharded and p.get("shard_optimizer_state"):
        refuse("shard_optimizer_state", "hybrid_shard_degree (FSDP) already shards optimizer state; give one")
    if p.get("pipeline_parallel_degree", 1) > 1:
        if p.get("tensor_parallel_degree", 1) > 1 or sharded:
            refuse("pipeline_parallel_degree", "is not supported together with tensor_parallel_degree or "
                                               "hybrid_shard_degree yet; use one of them")
        if p.get("gradient_accumulation_steps", 1) > 1:
            refuse("gradient_accumulation_steps", "use microbatches with pipeline parallelism instead")
        if p.get("fp16"):
            refuse("fp16", "is not supported with pipeline parallelism yet; use bf16")
    if p.get("tensor_parallel_degree", 1) > 1 and p.get("shard_optimizer_state"):
        refuse("shard_optimizer_state", "is not supported with tensor_parallel_degree; use hybrid_shard_degree "
                                        "for the data-parallel dimension")


def check(options: Any) -> dict[str, dict[str, Any]]:
    """Validate `distribution["smdistributed"]`; return its enabled strategies (at most one)."""
    field = "distribution.smdistributed"
    enabled = {}
    for strategy, allowed in (("dataparallel", DATAPARALLEL_OPTIONS), ("modelparallel", MODELPARALLEL_OPTIONS)):
        if strategy not in options:
            continue
        sub = options[strategy]
        if not isinstance(sub, dict):
            raise ValidationError(f"{field}.{strategy}", sub, "must be a dict such as {'enabled': True}")
        for option in sub:
            if option not in allowed:
                raise unknown_name_error(f"{field}.{strategy}", option, allowed)
        if not isinstance(sub.get("enabled", False), bool):
            raise ValidationError(f"{field}.{strategy}.enabled", sub["enabled"], "must be true or false")
        if strategy == "modelparallel":
            sub = {**sub, "parameters": check_parameters(sub.get("parameters", {}), f"{field}.modelparallel.parameters")}
        if sub.get("enabled", False):
            enabled[strategy] = sub
    if len(enabled) > 1:
        raise ValidationError(field, ..., "only one smdistributed strategy at a time; enable dataparallel "
                                          "or modelparallel, not both")
    return enabled


def hyperparameters(enabled: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the SDK emits for the enabled smdistributed strategy (spec 2.1)."""
    if "dataparallel" in enabled:
        return {"sagemaker_distributed_dataparallel_enabled": True,
                "sagemaker_distributed_dataparallel_custom_mpi_options":
                    enabled["dataparallel"].get("custom_mpi_options", "")}
    if "modelparallel" in enabled:
        return {"mp_parameters": enabled["modelparallel"]["parameters"],
                "sagemaker_distributed_dataparallel_enabled": False}
    return {}
