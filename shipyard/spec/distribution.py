"""The `distribution` argument: the keys SageMaker knows, validated, and turned into the `sagemaker_*`
hyperparameters the SDK emits (spec section 2.1), which is how the launchers inside an instance learn
the strategy. Which strategies can actually run is the launcher registry's business (runtime)."""

from __future__ import annotations

import shlex
from typing import Any

from shipyard.errors import ValidationError, unknown_name_error
from shipyard.spec import smdistributed

# distribution key -> the options it accepts
KNOWN: dict[str, frozenset[str]] = {
    "torch_distributed": frozenset({"enabled", "processes_per_host"}),
    "pytorchddp": frozenset({"enabled", "processes_per_host"}),
    "mpi": frozenset({"enabled", "processes_per_host", "custom_mpi_options"}),
    "smdistributed": frozenset({"dataparallel", "modelparallel"}),
    "parameter_server": frozenset({"enabled"}),
    "multi_worker_mirrored_strategy": frozenset({"enabled"}),
    "pytorchxla": frozenset({"enabled"}),
    "instance_groups": frozenset(),
}

_FLAGS = {
    "torch_distributed": "sagemaker_torch_distributed_enabled",
    "pytorchddp": "sagemaker_pytorch_ddp_enabled",
    "mpi": "sagemaker_mpi_enabled",
    "parameter_server": "sagemaker_parameter_server_enabled",
    "multi_worker_mirrored_strategy": "sagemaker_multi_worker_mirrored_strategy_enabled",
    "pytorchxla": "sagemaker_pytorch_xla_multi_worker_enabled",
}


def normalize(distribution: dict[str, Any] | str | None) -> dict[str, dict[str, Any]]:
    """Validate and return {strategy: options} for the enabled strategies. A bare name (the CLI's
    `--distribution torch_distributed`) means that strategy enabled."""
    if distribution is None:
        return {}
    if isinstance(distribution, str):
        distribution = {distribution: {"enabled": True}}
    if not isinstance(distribution, dict):
        raise ValidationError("distribution", distribution, "pass a dict such as {'torch_distributed': {'enabled': True}}")
    enabled = {}
    for key, options in distribution.items():
        if key not in KNOWN:
            raise unknown_name_error("distribution", key, KNOWN)
        if key == "instance_groups":
            continue   # which groups run it: groups() reads them
        if not isinstance(options, dict):
            raise ValidationError(f"distribution.{key}", options, "must be a dict of options, e.g. {'enabled': True}")
        for option in options:
            if option not in KNOWN[key]:
                raise unknown_name_error(f"distribution.{key}", option, KNOWN[key])
        if key == "smdistributed":
            options = smdistributed.check(options)
            if options:
                enabled[key] = options
        elif options.get("enabled", False):
            _check_processes(key, options)
            if key == "mpi":
                split_mpi_options(options.get("custom_mpi_options", ""))
            enabled[key] = options
    # One launcher runs a job: with two, only the first in the launchers' order would run (silently).
    # smdistributed is a library the launcher loads, so it goes with one of them (SageMaker's SMP form).
    launchers = sorted(k for k in enabled if k != "smdistributed")
    if len(launchers) > 1:
        raise ValidationError("distribution", launchers, "a job runs one strategy; enable only one of "
                              f"{' and '.join(launchers)}")
    return enabled


def groups(distribution: dict[str, Any] | str | None) -> list[str]:
    """The names in `distribution["instance_groups"]` (InstanceGroup objects or names), at most one, as
    SageMaker allows; whether the job has that group is the job's check."""
    value = distribution.get("instance_groups") if isinstance(distribution, dict) else None
    if value is None:
        return []
    if isinstance(value, (str, dict)) or not hasattr(value, "__iter__"):
        value = [value]
    names = [getattr(g, "instance_group_name", g) for g in value]
    if not all(isinstance(name, str) and name for name in names):
        raise ValidationError("distribution.instance_groups", names, "give a list of one InstanceGroup (or its "
                              "name), e.g. 'instance_groups': [train_group]")
    if len(names) != 1:
        raise ValidationError("distribution.instance_groups", names, "the distribution runs on exactly one "
                              "instance group (as on SageMaker); name one")
    return names


def split_mpi_options(value: Any, field: str = "distribution.mpi.custom_mpi_options") -> list[str]:
    """custom_mpi_options as mpirun argv tokens: shell quoting understood, never run through a shell."""
    if not isinstance(value, str):
        raise ValidationError(field, value, "must be a string of mpirun options, e.g. '-x FOO=1 --verbose'")
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise ValidationError(field, value, f"cannot be split into mpirun options ({exc}); balance the quotes") from None


def _check_processes(key: str, options: dict[str, Any]) -> None:
    count = options.get("processes_per_host")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
        raise ValidationError(f"distribution.{key}.processes_per_host", count, "must be an integer >= 1")


def to_hyperparameters(enabled: dict[str, dict[str, Any]], instance_type: str,
                       instance_groups: list[str] = ()) -> dict[str, Any]:
    """The sagemaker_* hyperparameters for the enabled strategies, as the SageMaker SDK emits them
    (`instance_groups`: the one group that runs the launcher, in a heterogeneous job)."""
    hps: dict[str, Any] = {}
    if instance_groups:
        hps["sagemaker_distribution_instance_groups"] = list(instance_groups)
    for key, options in enabled.items():
        if key in _FLAGS:
            hps[_FLAGS[key]] = True
        if key in ("torch_distributed", "pytorchddp", "smdistributed"):
            hps["sagemaker_instance_type"] = instance_type
        if key == "smdistributed":
            hps.update(smdistributed.hyperparameters(options))
        if key == "mpi":
            hps["sagemaker_mpi_custom_mpi_options"] = options.get("custom_mpi_options", "")
        if options.get("processes_per_host") is not None:
            # The toolkit reads this one key for every runner's processes per host.
            hps["sagemaker_mpi_num_of_processes_per_host"] = options["processes_per_host"]
    return hps


def from_hyperparameters(framework: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The inverse of to_hyperparameters for the launcher flags (what `attach` rebuilds)."""
    distribution = {}
    for key, flag in _FLAGS.items():
        if framework.get(flag):
            options: dict[str, Any] = {"enabled": True}
            if "sagemaker_mpi_num_of_processes_per_host" in framework and key != "pytorchxla":
                options["processes_per_host"] = framework["sagemaker_mpi_num_of_processes_per_host"]
            if key == "mpi" and framework.get("sagemaker_mpi_custom_mpi_options"):
                options["custom_mpi_options"] = framework["sagemaker_mpi_custom_mpi_options"]
            distribution[key] = options
    if framework.get("sagemaker_distributed_dataparallel_enabled"):
        custom = framework.get("sagemaker_distributed_dataparallel_custom_mpi_options", "")
        distribution["smdistributed"] = {"dataparallel": {"enabled": True, "custom_mpi_options": custom}}
    if distribution and framework.get("sagemaker_distribution_instance_groups"):
        distribution["instance_groups"] = list(framework["sagemaker_distribution_instance_groups"])
    return distribution


# Strategies only the TensorFlow toolkit runs (spec 2.3, 2.9, 2.10).
TENSORFLOW_ONLY = ("parameter_server", "multi_worker_mirrored_strategy")


def check_tensorflow(enabled: dict[str, dict[str, Any]], framework: str | None, instance_count: int) -> None:
    """The TF strategies run in TensorFlow jobs only (and, as every strategy, on their own: normalize);
    parameter_server needs more than one instance (the toolkit silently runs a single process otherwise)."""
    for key in TENSORFLOW_ONLY:
        if key not in enabled:
            continue
        if framework != "tensorflow":
            raise ValidationError(f"distribution.{key}", enabled[key],
                                  "is a TensorFlow strategy; use shipyard.tensorflow.TensorFlow "
                                  "(PyTorch jobs: torch_distributed or mpi)")
        if key == "parameter_server" and instance_count < 2:
            raise ValidationError("instance_count", instance_count,
                                  "parameter_server needs instance_count >= 2; add instances or remove the distribution")
