"""What a training job is: the frozen request (CreateTrainingJob's shape, snake_case) that the SDK and
CLI build and the controller runs. Everything here is validated when the model is made, so a job that
exists in the store is a job that can be started."""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from shipyard.contract.config import HOMOGENEOUS_GROUP
from shipyard.errors import ValidationError, unknown_name_error
from shipyard.settings import default_backend, default_oversubscribe
from shipyard.spec.build import UserModel
from shipyard.spec.names import CHANNEL_NAME_RE, validate_job_name
from shipyard.spec.profiler import ProfilerConfig
from shipyard.spec.debugger import DebuggerHookConfig, TensorBoardOutputConfig
from shipyard.spec.rules import RuleConfig, check_rules

ENV_KEY_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# The toolkit turns each key into `--key value`: a key that already starts with '-' or holds whitespace
# would reach the script as another option (`----x`) or split in two.
HYPERPARAMETER_KEY_RE = re.compile(r"^[^-\s][^\s]*$")
MAX_HYPERPARAMETERS = 100
MAX_KEEP_ALIVE = 21600


class MetricDefinition(UserModel):
    """A metric scraped from every host's log lines: the first capture group, parsed as a number."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    name: str = Field(alias="Name", min_length=1, max_length=255)
    regex: str = Field(alias="Regex", min_length=1, max_length=500)

    @field_validator("regex")
    @classmethod
    def _compiles_with_a_group(cls, value: str) -> str:
        try:
            pattern = re.compile(value)
        except re.error as exc:
            raise ValueError(f"regex {value!r} does not compile: {exc}") from None
        if pattern.groups < 1:
            raise ValueError(f"regex {value!r} has no capture group; wrap the number in (...)")
        return value


# SageMaker's input modes (docs/input-modes.md): File copies a channel before the script starts, FastFile
# mounts it and fetches bytes on first read, Pipe streams it into one FIFO per epoch.
INPUT_MODES = ("File", "FastFile", "Pipe")
PIPE_ONLY = "works only in Pipe mode (SageMaker's rule); set input_mode='Pipe'"


def check_input_mode(value: str) -> str:
    if value not in INPUT_MODES:
        raise unknown_name_error("input_mode", value, INPUT_MODES)
    return value


# SageMaker's limits on ResourceConfig.InstanceGroups and S3DataSource.InstanceGroupNames.
MAX_INSTANCE_GROUPS = 5
GROUP_NAME_MAX = 64


class InstanceGroupSpec(UserModel):
    """One instance group of a heterogeneous job: `instance_count` instances of `instance_type`, named."""

    instance_group_name: str
    instance_type: str
    instance_count: int = Field(ge=1)

    @field_validator("instance_group_name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not 1 <= len(value) <= GROUP_NAME_MAX or value.strip() != value:
            raise ValidationError("instance_group_name", value, f"must be 1-{GROUP_NAME_MAX} characters without "
                                  "leading or trailing spaces, e.g. 'data' or 'train'")
        return value


def check_group_names(field: str, names, groups) -> None:
    """`names` (a channel's or the distribution's instance_groups) name groups of the job."""
    known = [g.instance_group_name for g in groups]
    for name in names:
        if name not in known:
            fix = (f"the job's groups are {', '.join(known)}" if known else
                   "the job has no instance_groups; give instance_groups=[InstanceGroup(...)] or remove it")
            raise ValidationError(field, name, f"is not an instance group of this job; {fix}")


class ChannelSpec(UserModel):
    """A channel: its source (an object prefix, a manifest of objects, or a file system directory) and how
    the script sees it. `input_mode` is the channel's own mode, the job's when it gave none."""

    name: str
    uri: str = Field(min_length=1)   # the prefix, the manifest, or the file system directory
    distribution: Literal["FullyReplicated", "ShardedByS3Key"] = "FullyReplicated"
    input_mode: str = "File"
    content_type: str | None = None
    record_wrapping: Literal["None", "RecordIO"] | None = None
    s3_data_type: Literal["S3Prefix", "ManifestFile", "AugmentedManifestFile"] = "S3Prefix"
    compression: Literal["None", "Gzip"] | None = None
    attribute_names: tuple[str, ...] = ()
    shuffle_seed: int | None = None   # ShuffleConfig.Seed
    # FileSystemInput (EFS / FSx for Lustre): `uri` is a directory shown read-only at the channel.
    file_system_type: Literal["EFS", "FSxLustre"] | None = None
    file_system_id: str | None = None
    # S3DataSource.InstanceGroupNames: only these groups' instances get the channel (empty: every instance).
    instance_groups: tuple[str, ...] = Field(default=(), max_length=MAX_INSTANCE_GROUPS)

    @field_validator("name")
    @classmethod
    def _channel_name(cls, value: str) -> str:
        if not CHANNEL_NAME_RE.match(value) or value in (".", ".."):
            raise ValueError(f"channel name {value!r} is not a directory name; use 1-64 letters, digits, '.', "
                             "'-' or '_' (not '.' or '..' alone)")
        return value

    @field_validator("input_mode")
    @classmethod
    def _input_mode(cls, value: str) -> str:
        return check_input_mode(value)

    @model_validator(mode="after")
    def _mode_rules(self) -> ChannelSpec:
        pipe = self.input_mode == "Pipe"
        if self.compression == "Gzip" and not pipe:
            raise ValidationError("compression", "Gzip", f"{PIPE_ONLY}, or store the objects uncompressed")
        if self.record_wrapping == "RecordIO" and not pipe:
            raise ValidationError("record_wrapping", "RecordIO", f"{PIPE_ONLY}, or remove it")
        if self.s3_data_type == "AugmentedManifestFile" and not pipe:
            raise ValidationError("s3_data_type", "AugmentedManifestFile", PIPE_ONLY)
        if self.input_mode == "FastFile" and self.s3_data_type != "S3Prefix":
            raise ValidationError("s3_data_type", self.s3_data_type, "FastFile mounts an S3Prefix only (as on "
                                  "SageMaker); use input_mode='File' or 'Pipe' for a manifest")
        if (self.s3_data_type == "AugmentedManifestFile") != bool(self.attribute_names):
            raise ValidationError("attribute_names", list(self.attribute_names),
                                  "give the attributes to stream with s3_data_type='AugmentedManifestFile' "
                                  "(and only with it)")
        if self.file_system_type and self.distribution != "FullyReplicated":
            raise ValidationError("distribution", self.distribution, "a file system channel is the same for every "
                                  "instance (SageMaker reports it FullyReplicated); remove distribution")
        if self.file_system_type and self.input_mode != "File":
            raise ValidationError("input_mode", self.input_mode, "a file system channel is mounted in File mode "
                                  "only (as on SageMaker); remove input_mode")
        return self


class SpotSimulation(UserModel):
    """Where capacity is simulated (the local backend), when spot capacity is taken away.

    `interruptions_at`: seconds after each attempt's instances start, one interruption each, consumed in
    order across attempts; `rate_per_hour`: random interruptions at that mean rate; `capacity_delay_seconds`:
    how long capacity stays gone after an interruption."""

    interruptions_at: tuple[float, ...] = ()
    rate_per_hour: float = Field(default=0.0, ge=0)
    capacity_delay_seconds: float = Field(default=0.0, ge=0)
    seed: int | None = None


CONTROLLERS = ("local", "cluster")


class JobSpec(UserModel):
    job_name: str
    hyperparameters: dict[str, str] = Field(default_factory=dict)
    # With instance_groups, the job's total and its first group's type (`groups` has each one).
    instance_count: int = Field(default=1, ge=1)
    instance_type: str = "local"
    # A heterogeneous cluster (docs/heterogeneous-clusters.md): instead of instance_type/instance_count.
    instance_groups: tuple[InstanceGroupSpec, ...] = ()
    channels: tuple[ChannelSpec, ...] = ()
    # The job's TrainingInputMode: each channel's mode unless the channel gives its own.
    input_mode: str = "File"
    output_path: str
    metric_definitions: tuple[MetricDefinition, ...] = ()
    # AlgorithmSpecification.EnableSageMakerMetricsTimeSeries (None: SageMaker's default, on). shipyard keeps
    # every metric value either way; describe() says what was asked.
    enable_sagemaker_metrics: bool | None = None
    environment: dict[str, str] = Field(default_factory=dict)
    max_run: int = Field(default=86400, ge=1, le=28 * 86400)
    # SageMaker waits 120 s between SIGTERM and SIGKILL; tests make it short.
    stop_grace_seconds: float = Field(default=120.0, ge=0)
    oversubscribe: bool = Field(default_factory=default_oversubscribe)   # SHIPYARD_OVERSUBSCRIBE
    framework: str | None = None
    framework_version: str | None = None
    py_version: str | None = None
    backend: str = Field(default_factory=default_backend)  # SHIPYARD_BACKEND
    # Where the job's controller runs: "local", on the submitting machine, or "cluster", on the Ray cluster's
    # head (backend="ray"), so the submitting machine may go away (control/cluster_home.py, docs/ray.md).
    controller: str = "local"
    tags: tuple[dict[str, str], ...] = ()
    use_spot_instances: bool = False
    max_wait: int | None = Field(default=None, ge=1)
    # USD the job may cost (its instances' running time at the catalog's prices, spot's when spot, and a
    # warm pool's retained time): it is stopped before it would cost more (docs/planner.md, Budgets).
    max_cost: float | None = Field(default=None, gt=0)
    checkpoint_s3_uri: str | None = None
    checkpoint_local_path: str = "/opt/ml/checkpoints"
    max_retry_attempts: int = Field(default=0, ge=0, le=30)
    # The notice an interrupted instance gets between SIGTERM and SIGKILL (EC2 gives about 2 minutes).
    interruption_notice_seconds: float = Field(default=120.0, ge=0)
    spot_simulation: SpotSimulation | None = None
    # Spot without checkpoints restarts from scratch after every interruption: only on explicit request.
    spot_without_checkpoints: bool = False
    # No training progress on any rank for this long is a hang (0: never, and the SDK warns); see
    # runtime/heartbeat.py.
    hang_timeout_seconds: float = Field(default=300.0, ge=0)
    # Keep the instances warm this long after the job ends, for the next matching job (docs/warm-pools.md).
    # SageMaker's API allows 0-21600 s; 0 or None: no warm pool.
    keep_alive_period_in_seconds: int | None = None
    # Debugger and profiler rules evaluated beside the job (shipyard/spec/rules.py).
    rules: tuple[RuleConfig, ...] = ()
    # Tensors the debugger hook saves (None: no hook, nothing imported into the training processes).
    debugger_hook_config: DebuggerHookConfig | None = None
    # System and framework profiling (shipyard/spec/profiler.py); None: off.
    profiler_config: ProfilerConfig | None = None
    # The script's TensorBoard directory synced to storage while the job runs; None: not synced.
    tensorboard_output_config: TensorBoardOutputConfig | None = None
    # What SageMaker's DescribeTrainingJob returns as RoleArn, ResourceConfig.VolumeSizeInGB and VpcConfig:
    # recorded and shown, with no effect on machines you own (docs/contract.md).
    role: str | None = None
    volume_size: int = Field(default=30, ge=1)
    subnets: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    # AlgorithmSpecification.TrainingImage, as given (the SDK checks it against the image catalog, spec/images.py).
    image_uri: str | None = None
    # The built-in algorithm every instance runs in place of an entry point (ALGORITHMS in spec/images.py): what
    # the catalog said the image runs when the job was made, recorded so that the record alone says what ran.
    algorithm: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _sized_by_groups(cls, data):
        """With instance_groups the job's instance_count and instance_type follow from them; given as well
        (other than what they follow as: a stored spec read again), they are an error, as on SageMaker."""
        groups = data.get("instance_groups") if isinstance(data, dict) else None
        if not groups or not isinstance(groups, (list, tuple)):
            return data
        try:
            parsed = [InstanceGroupSpec.model_validate(g) if isinstance(g, dict) else g for g in groups]
            total, first = sum(g.instance_count for g in parsed), parsed[0].instance_type
        except Exception:   # each group's own errors are reported by its field
            return data
        for name, derived in (("instance_count", total), ("instance_type", first)):
            if data.get(name) is not None and data[name] != derived:
                raise ValidationError(name, data[name], "cannot be combined with instance_groups (as on "
                                      "SageMaker): give each group's instance_type and instance_count instead")
        return {**data, "instance_count": total, "instance_type": first}

    @field_validator("job_name")
    @classmethod
    def _job_name(cls, value: str) -> str:
        return validate_job_name(value)

    @field_validator("algorithm")
    @classmethod
    def _algorithm(cls, value: str | None) -> str | None:
        from shipyard.spec.images import ALGORITHMS

        if value is not None and value not in ALGORITHMS:
            raise unknown_name_error("algorithm", value, ALGORITHMS)
        return value

    @field_validator("instance_groups")
    @classmethod
    def _groups(cls, value: tuple[InstanceGroupSpec, ...]) -> tuple[InstanceGroupSpec, ...]:
        if len(value) > MAX_INSTANCE_GROUPS:
            raise ValidationError("instance_groups", [g.instance_group_name for g in value],
                                  f"{len(value)} groups; at most {MAX_INSTANCE_GROUPS} are allowed (as on SageMaker)")
        names = [g.instance_group_name for g in value]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValidationError("instance_groups", repeated, "group names must be unique; rename one")
        return value

    @field_validator("input_mode")
    @classmethod
    def _input_mode(cls, value: str) -> str:
        return check_input_mode(value)

    @field_validator("hyperparameters")
    @classmethod
    def _hyperparameters(cls, value: dict[str, str]) -> dict[str, str]:
        users = [key for key in value if not key.startswith("sagemaker_")]  # ours are not the user's to count
        if len(users) > MAX_HYPERPARAMETERS:
            raise ValidationError("hyperparameters", ..., f"{len(users)} hyperparameters; at most "
                                  f"{MAX_HYPERPARAMETERS} are allowed (not counting shipyard's sagemaker_* keys)")
        for key, item in value.items():
            if not key or len(key) > 256:
                raise ValidationError("hyperparameters", key, "a name must be 1-256 characters")
            if not HYPERPARAMETER_KEY_RE.match(key):
                raise ValidationError("hyperparameters", key, "a name must not start with '-' or contain "
                                      "whitespace (the script gets it as --NAME); use e.g. 'learning_rate'")
            if len(item) > 2500:
                raise ValidationError(f"hyperparameters[{key!r}]", item,
                                      f"is {len(item)} characters; at most 2500 are allowed")
        return value

    @field_validator("environment")
    @classmethod
    def _environment(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 100:
            raise ValueError(f"{len(value)} environment variables; at most 100 are allowed")
        for key, item in value.items():
            if not ENV_KEY_RE.match(key) or len(key) > 512:
                raise ValueError(f"environment variable name {key!r} must match [a-zA-Z_][a-zA-Z0-9_]*")
            if key.startswith("SM_"):
                raise ValidationError("environment", key, "SM_* variables are the training contract's "
                                      "(docs/contract.md) and would be overwritten; use another name")
            if len(item) > 512:
                raise ValueError(f"environment variable {key!r} is longer than 512 characters")
        return value

    @field_validator("keep_alive_period_in_seconds")
    @classmethod
    def _keep_alive(cls, value: int | None) -> int | None:
        if value is not None and not 0 <= value <= MAX_KEEP_ALIVE:
            raise ValidationError("keep_alive_period_in_seconds", value, f"must be 0-{MAX_KEEP_ALIVE} seconds "
                                  "(SageMaker's range); 0 keeps no warm pool")
        return value

    @field_validator("checkpoint_local_path")
    @classmethod
    def _checkpoint_local_path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValidationError("checkpoint_local_path", value, "must be an absolute path inside the "
                                  "instance, e.g. /opt/ml/checkpoints (the default)")
        return value

    @field_validator("metric_definitions")
    @classmethod
    def _unique_metrics(cls, value: tuple[MetricDefinition, ...]) -> tuple[MetricDefinition, ...]:
        names = [m.name for m in value]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValidationError("metric_definitions", repeated, "metric names must be unique (two regexes "
                                  "would mix their values in one series); rename or remove one")
        return value

    @model_validator(mode="after")
    def _unique_channels(self) -> JobSpec:
        check_rules(self.rules)
        if any(r.kind == "profiler" for r in self.rules) and (
                self.profiler_config is None or self.profiler_config.disable_profiler):
            raise ValueError("profiler rules need profiling on: give profiler_config=ProfilerConfig() "
                             "(and not disable_profiler=True)")
        names = [c.name for c in self.channels]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"channel names must be unique; repeated: {', '.join(duplicates)}")
        if len(self.channels) > 20:
            raise ValueError(f"{len(self.channels)} channels; at most 20 are allowed")
        if len(self.metric_definitions) > 40:
            raise ValueError(f"{len(self.metric_definitions)} metric definitions; at most 40")
        if self.use_spot_instances:
            if self.max_wait is None:
                raise ValueError("use_spot_instances needs max_wait (seconds of waiting plus running)")
            if self.max_wait < self.max_run:
                raise ValueError(f"max_wait ({self.max_wait}) must be >= max_run ({self.max_run}): it bounds "
                                 "waiting for capacity plus running")
            if not self.checkpoint_s3_uri and not self.spot_without_checkpoints:
                raise ValueError("a spot job without checkpoint_s3_uri starts again from scratch after each "
                                 "interruption; set checkpoint_s3_uri, or spot_without_checkpoints=True to accept that")
        elif self.max_wait is not None:
            raise ValueError("max_wait applies to spot jobs only; set use_spot_instances=True or remove it")
        if self.use_spot_instances and self.keep_alive_period_in_seconds:
            raise ValidationError("keep_alive_period_in_seconds", self.keep_alive_period_in_seconds,
                                  "warm pools cannot be combined with use_spot_instances (as on SageMaker: spot "
                                  "capacity is taken back, a pool would hold it); remove one of them")
        if self.controller not in CONTROLLERS:
            raise unknown_name_error("controller", self.controller, CONTROLLERS)
        if self.controller == "cluster" and self.backend != "ray":
            raise ValidationError("controller", self.controller, f"runs on a Ray cluster's head, so it needs "
                                  f"backend='ray' (not {self.backend!r}); use controller='local' or backend='ray'")
        if self.controller == "cluster" and self.keep_alive_period_in_seconds:
            raise ValidationError("keep_alive_period_in_seconds", self.keep_alive_period_in_seconds,
                                  "warm pools are not kept for jobs whose controller is on the cluster (not built "
                                  "yet); remove one of them")
        if self.spot_simulation is not None and not self.use_spot_instances:
            raise ValueError("spot_simulation needs use_spot_instances=True")
        for channel in self.channels:
            check_group_names(f"channel {channel.name}: instance_groups", channel.instance_groups,
                              self.instance_groups)
        check_group_names("distribution.instance_groups", self.distribution_groups, self.instance_groups)
        if self.instance_groups and self.keep_alive_period_in_seconds:
            raise ValidationError("keep_alive_period_in_seconds", self.keep_alive_period_in_seconds,
                                  "warm pools cannot be combined with instance_groups (as on SageMaker); "
                                  "remove one of them")
        if self.algorithm is not None:   # what the algorithm would refuse on the instance, refused now
            from shipyard.contract.config import input_data_config
            from shipyard.spec.images import ALGORITHMS

            if "sagemaker_program" in self.hyperparameters:
                raise ValidationError("algorithm", self.algorithm, "a built-in algorithm runs instead of an entry "
                                      "point; remove one of them")
            algorithm = ALGORITHMS.load(self.algorithm)
            if self.hyperparameters:
                algorithm.validate(self.hyperparameters)
            if self.channels:
                algorithm.check_channels(input_data_config(self.channels))
        return self

    @property
    def all_metric_definitions(self) -> tuple[MetricDefinition, ...]:
        """What the job's logs are scraped for: its own definitions, and a built-in algorithm's (as
        SageMaker's algorithm specification carries them), the job's winning where both name a metric."""
        if self.algorithm is None:
            return self.metric_definitions
        from shipyard.spec.images import ALGORITHMS

        own = {m.name for m in self.metric_definitions}
        return self.metric_definitions + tuple(MetricDefinition(**d) for d in
                                               ALGORITHMS.load(self.algorithm).metric_definitions()
                                               if d["Name"] not in own)

    @property
    def hosts(self) -> list[str]:
        """algo-1..algo-N, sorted as SageMaker sorts them (lexicographically)."""
        return sorted(f"algo-{i}" for i in range(1, self.instance_count + 1))

    @property
    def groups(self) -> list[dict]:
        """resourceconfig.json's instance_groups: each group's name, type and hosts. Hosts are numbered
        across the groups in the order they are given (algo-1.. for the first group, then on); a job
        without groups is one group, homogeneousCluster, as SageMaker writes it."""
        given = self.instance_groups or (InstanceGroupSpec(instance_group_name=HOMOGENEOUS_GROUP,
                                                           instance_type=self.instance_type,
                                                           instance_count=self.instance_count),)
        groups, first = [], 1
        for group in given:
            hosts = [f"algo-{i}" for i in range(first, first + group.instance_count)]
            groups.append({"instance_group_name": group.instance_group_name,
                           "instance_type": group.instance_type, "hosts": hosts})
            first += group.instance_count
        return groups

    def group_of(self, host: str) -> dict:
        return next(group for group in self.groups if host in group["hosts"])

    @property
    def distribution_groups(self) -> list[str]:
        """The groups the distribution's launcher runs on (sagemaker_distribution_instance_groups)."""
        value = self.hyperparameters.get("sagemaker_distribution_instance_groups")
        return list(json.loads(value)) if value else []

    @property
    def entry_point(self) -> str:
        return _decoded(self.hyperparameters["sagemaker_program"])

    @property
    def source_uri(self) -> str:
        return _decoded(self.hyperparameters["sagemaker_submit_directory"])

    @property
    def strategy(self) -> str:
        """The distribution strategy, as `distribution=` names it; "single" without one."""
        from shipyard.spec.distribution import from_hyperparameters

        enabled = from_hyperparameters({k: _decoded(v) for k, v in self.hyperparameters.items()})
        return "+".join(key for key in enabled if key != "instance_groups") or "single"


def _decoded(value: str) -> str:
    """Framework estimators JSON-encode hyperparameter values, the generic one may not."""
    try:
        return json.loads(value)
    except ValueError:
        return value
