"""Estimators shaped like SageMaker's: same argument names, `fit()`, `attach()`, `model_data`,
`latest_training_job`. Everything is validated before anything is written or started: a bad argument,
file, channel or resource request is an error that names the field and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shipyard.contract import hyperparameters as hp
from shipyard.errors import ShipyardError, ValidationError
from shipyard.sdk.arguments import HONOURED, SPEC_ARGUMENTS, default, sort_arguments
from shipyard.sdk.channels import absolute as _absolute, channels, job_input_mode
from shipyard.sdk.job import ClusterTrainingJob, TrainingJob
from shipyard.spec import distribution as dist
from shipyard.spec.build import build as build_model
from shipyard.spec.job import InstanceGroupSpec, JobSpec, MetricDefinition, check_input_mode
from shipyard.spec.names import base_of, generate_job_name, validate_job_name
from shipyard.spec.profiler import ProfilerConfig
from shipyard.spec.tuning import OBJECTIVE_HYPERPARAMETER

DEFAULT_BASE_JOB_NAME = "training-job"


class EstimatorBase:
    """Script mode: an entry point (and source dir) run on `instance_count` instances."""

    framework: str | None = None
    # Framework estimators JSON-encode every hyperparameter; the generic one only with a source dir.
    json_hyperparameters = True
    default_base_job_name = DEFAULT_BASE_JOB_NAME

    def __init__(self, entry_point: str | None = None, **kwargs: Any) -> None:
        args = sort_arguments({"entry_point": entry_point, **kwargs})
        if args.get("instance_groups"):
            for name in ("instance_type", "instance_count"):
                if args.get(name) is not None:
                    raise ValidationError(name, args[name], "cannot be combined with instance_groups (as on "
                                          "SageMaker): give each InstanceGroup its instance_type and instance_count")
        self._assign(args)
        self._check_arguments()

    def _assign(self, args: dict[str, Any]) -> None:
        """Every honoured argument becomes the attribute of its name (its default when not given or
        None); the few the SDK keeps in another form are converted here."""
        for name in HONOURED:
            value = args.get(name)
            setattr(self, name, default(name) if value is None else value)
        hyperparameters = self.__dict__.pop("hyperparameters") or {}  # the attribute's name is a method
        self._hyperparameters = dict(hyperparameters) if isinstance(hyperparameters, dict) else hyperparameters
        self.dependencies = list(self.dependencies)
        self.metric_definitions = list(self.metric_definitions)
        self.tags = list(self.tags)
        self.environment = dict(self.environment)
        from shipyard.debugger.sdk import hook_and_rules

        self.rules, self.debugger_hook_config = hook_and_rules(args.get("rules"), args.get("debugger_hook_config"))
        self.profiler_config = _profiler_config(args.get("profiler_config"), bool(self.disable_profiler))
        self._enabled_distribution = dist.normalize(self.distribution)
        self.instance_groups = _instance_groups(self.instance_groups)
        if self.instance_groups:   # what the job's instance_count and instance_type follow as (spec/job.py)
            self.instance_count = sum(g.instance_count for g in self.instance_groups)
            self.instance_type = self.instance_groups[0].instance_type
        self._distribution_groups = _distribution_groups(self.distribution, self._enabled_distribution,
                                                         self.instance_groups)
        self.latest_training_job: TrainingJob | None = None
        self.jobs: list[TrainingJob] = []
        self._current_job_name: str | None = None

    # -- validation that needs no files -------------------------------------------------------
    def _check_arguments(self) -> None:
        if self.image_uri is not None:
            from shipyard.spec.images import resolve

            resolve(self.image_uri)   # an unknown image is an error now, naming the catalog to extend
        if not self.entry_point and self._algorithm() is None:
            raise ValidationError("entry_point", self.entry_point, "give the training script, e.g. "
                                  "entry_point='train.py', or the image_uri of a built-in algorithm "
                                  "(image_uris.retrieve('xgboost', region, '1.7-1'))")
        count = self.instance_count
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValidationError("instance_count", count, "must be an integer >= 1")
        if not isinstance(self._hyperparameters, dict):
            raise ValidationError("hyperparameters", self._hyperparameters, "must be a dict")
        hp.check_user(self._hyperparameters)
        hp.encode_json(self._hyperparameters)  # raises naming a value that is not JSON-serialisable
        self.container_log_level = _log_level(self.container_log_level)
        if self.hang_timeout_seconds == 0:
            import warnings

            warnings.warn("hang_timeout_seconds=0 turns hang detection off: a job whose ranks stop making "
                          "progress runs until max_run", stacklevel=3)
        from shipyard.spec.catalog import get_instance_type

        for group in self.instance_groups:
            get_instance_type(group.instance_type)
        get_instance_type(self.instance_type)
        if self.max_cost is not None:
            self._check_budget()
        if self._algorithm() is not None:
            self._check_algorithm()
        self._check_launchers()
        self._check_framework_version()

    def _algorithm(self) -> str | None:
        """The built-in algorithm this estimator trains: its image's, when it gives no entry point (with one,
        the script runs, as in SageMaker's algorithm images' script mode)."""
        if self.image_uri is None or self.entry_point:
            return None
        from shipyard.spec.images import resolve

        return resolve(self.image_uri).algorithm

    def _check_algorithm(self) -> None:
        """A built-in algorithm brings its program and its way of spreading over the instances; its
        hyperparameters are checked as the algorithm checks them, before anything runs."""
        from shipyard.spec.images import ALGORITHMS

        name = self._algorithm()
        for argument in ("source_dir", "dependencies", "distribution"):
            if getattr(self, argument):
                raise ValidationError(argument, getattr(self, argument), f"the built-in {name} algorithm runs its "
                                      "own program and distributes itself over the instances; remove it")
        if self._encoding() != "str":
            raise ValidationError("image_uri", self.image_uri, "a built-in algorithm takes its hyperparameters as "
                                  "plain strings: use `from shipyard import Estimator`, not a framework estimator")
        ALGORITHMS.load(name).validate(self._encode(self._hyperparameters))

    def _check_budget(self) -> None:
        """A budget on instances without a price would never stop the job."""
        from shipyard.spec.catalog import get_instance_type

        if isinstance(self.max_cost, bool) or not isinstance(self.max_cost, (int, float)) or not self.max_cost > 0:
            raise ValidationError("max_cost", self.max_cost, "must be a positive number of USD")
        types = [g.instance_type for g in self.instance_groups] or [self.instance_type]
        price = "spot_usd_per_hour" if self.use_spot_instances else "on_demand_usd_per_hour"
        if not any(getattr(get_instance_type(name), price) for name in types):
            raise ValidationError("max_cost", self.max_cost, f"{', '.join(types)} has no {price} in the catalog, so "
                                  "a budget would never stop the job; give its price in "
                                  "$SHIPYARD_HOME/instance_types.yaml (docs/planner.md) or leave max_cost out")

    def _check_launchers(self) -> None:
        from shipyard.runtime.launchers import REGISTRY

        for strategy in self._enabled_distribution:
            if strategy not in REGISTRY:
                runnable = sorted(k for k in REGISTRY if k in dist.KNOWN)
                raise ValidationError("distribution", strategy,
                                      f"not supported by shipyard yet; available: {', '.join(runnable)}")
        dist.check_tensorflow(self._enabled_distribution, self.framework, self.instance_count)
        if set(self._enabled_distribution) & {"torch_distributed", "pytorchddp"} and not str(
            self.entry_point
        ).endswith(".py"):
            raise ValidationError("entry_point", self.entry_point, "torchrun runs Python programs only; use a .py file")

    def _check_framework_version(self) -> None:
        """Say clearly when the framework installed here is not the version the job asks for."""

    # -- SageMaker surface -------------------------------------------------------------------
    def hyperparameters(self) -> dict[str, str]:
        return self._encode(self._hyperparameters)

    def _encoding(self) -> str:
        """How this estimator sends hyperparameters (hp.ENCODINGS): JSON for framework estimators (and
        any with a source_dir), str() for the generic one without, as SageMaker's SDK."""
        return "json" if self.json_hyperparameters or self.source_dir else "str"

    def _encode(self, values: dict[str, Any]) -> dict[str, str]:
        return hp.ENCODINGS[self._encoding()](values)

    def set_hyperparameters(self, **kwargs: Any) -> None:
        hp.check_user(kwargs)
        hp.encode_json(kwargs)
        self._hyperparameters.update(kwargs)

    @property
    def model_data(self) -> str:
        if self.latest_training_job is not None:
            return self.latest_training_job.describe()["ModelArtifacts"]["S3ModelArtifacts"]
        raise ValidationError("model_data", None, "no job has run yet; call fit() first")

    def logs(self) -> None:
        self._require_job().logs()

    @property
    def training_job_analytics(self):
        """The latest job's metrics over time (shipyard.analytics.TrainingJobAnalytics)."""
        from shipyard.sdk.analytics import TrainingJobAnalytics

        return TrainingJobAnalytics(self._require_job().name)

    def latest_job_debugger_artifacts_path(self) -> str | None:
        """Where the latest job's debugger hook writes its tensors; None without a job or a hook."""
        from shipyard.spec.debugger import debug_output_uri

        spec = self._latest_spec()
        if spec is None or spec.debugger_hook_config is None:
            return None
        return debug_output_uri(spec.output_path, spec.job_name, spec.debugger_hook_config.s3_output_path)

    def latest_job_profiler_artifacts_path(self) -> str | None:
        """Where the latest job's profiler writes; None without a job or with profiling off."""
        spec = self._latest_spec()
        if spec is None or spec.profiler_config is None or spec.profiler_config.disable_profiler:
            return None
        return spec.profiler_config.output_uri(spec.output_path, spec.job_name)

    def latest_job_tensorboard_artifacts_path(self) -> str | None:
        """Where the latest job's TensorBoard directory is synced; None without a job or a
        tensorboard_output_config."""
        spec = self._latest_spec()
        if spec is None or spec.tensorboard_output_config is None:
            return None
        return spec.tensorboard_output_config.output_uri(spec.job_name)

    def _latest_spec(self):
        if self.latest_training_job is None:
            return None
        return self._store().get_job(self.latest_training_job.name).spec

    # -- the latest job's profiling while it runs (SageMaker's UpdateTrainingJob; control/profiling.py) --
    def enable_default_profiling(self) -> None:
        """System metrics every 500 ms and the ProfilerReport rule, for a job running without profiling."""
        self._profiling_updated(self._require_job().enable_default_profiling())

    def disable_profiling(self) -> None:
        """No more system or framework metrics; the profiler rules stop."""
        self._profiling_updated(self._require_job().disable_profiling())

    def update_profiler(self, rules=None, system_monitor_interval_millis: int | None = None,
                        s3_output_path: str | None = None, framework_profile_params=None,
                        disable_framework_metrics: bool = False) -> None:
        """Profiling on with what is given (the rest as it was), new profiler rules, or with
        disable_framework_metrics the framework metrics off. Running training processes follow new
        framework settings from their next step when they started with framework metrics; otherwise
        those begin when the processes next start (the job's events say so)."""
        self._profiling_updated(self._require_job().update_profiler(
            rules, system_monitor_interval_millis, s3_output_path, framework_profile_params,
            disable_framework_metrics))

    def _profiling_updated(self, spec) -> None:
        self.profiler_config = spec.profiler_config
        self.disable_profiler = spec.profiler_config.disable_profiler

    def update(self, keep_alive_period_in_seconds: int | None = None, **unsupported: Any) -> None:
        """SageMaker's `update_training_job` for the latest job: a new keep-alive period for its warm pool
        (0 releases it). Its profiling changes with enable_default_profiling(), disable_profiling() and
        update_profiler(), as in SageMaker's SDK."""
        if unsupported:
            raise ValidationError(next(iter(unsupported)), next(iter(unsupported.values())),
                                  "only keep_alive_period_in_seconds can be updated here")
        if keep_alive_period_in_seconds is None:
            raise ValidationError("keep_alive_period_in_seconds", None, "give the new period in seconds (0 releases)")
        self._require_job().update(keep_alive_period_in_seconds)

    def _require_job(self) -> TrainingJob:
        if self.latest_training_job is None:
            raise ValidationError("latest_training_job", None, "no job has run yet; call fit() first")
        return self.latest_training_job

    # -- building the job --------------------------------------------------------------------
    def _store(self):
        from shipyard.store import Store

        return Store()

    def _job_name(self, job_name: str | None) -> str:
        if job_name:
            return validate_job_name(job_name)
        base = self.base_job_name or self.default_base_job_name
        return generate_job_name(base)

    def _output_path(self, store) -> str:
        return _absolute(self.output_path, "output_path") if self.output_path else f"file://{store.home / 'output'}"

    def _source(self) -> tuple[Path, Path | None, str]:
        """(entry point file, source dir or None, sagemaker_program); checks both exist."""
        if self.source_dir and "://" in str(self.source_dir) and not str(self.source_dir).startswith("file://"):
            raise ValidationError("source_dir", self.source_dir, "give a local directory")
        if self.source_dir:
            source = Path(str(self.source_dir).removeprefix("file://")).expanduser()
            if not source.is_dir():
                raise ValidationError("source_dir", self.source_dir, "no such directory")
            entry = source / self.entry_point
            if Path(self.entry_point).is_absolute():  # SageMaker's is relative to source_dir
                if not entry.resolve().is_relative_to(source.resolve()):
                    raise ValidationError("entry_point", self.entry_point, f"is outside source_dir {source}; "
                                          "give its path relative to source_dir (only source_dir is uploaded)")
                self.entry_point = str(entry.resolve().relative_to(source.resolve()))
            if not entry.is_file():
                raise ValidationError("entry_point", self.entry_point, f"no such file in source_dir {source}")
            return entry, source, str(self.entry_point)
        entry = Path(self.entry_point).expanduser()
        if not entry.is_file():
            raise ValidationError("entry_point", self.entry_point, "no such file")
        return entry, None, entry.name

    def _framework_hyperparameters(self, job_name: str, output_path: str) -> dict[str, Any]:
        """Hyperparameters a framework adds for the job (TensorFlow's model_dir)."""
        return {}

    def _spec(self, inputs: Any, job_name: str | None, store) -> JobSpec:
        algorithm = self._algorithm()
        program = None if algorithm else self._source()[2]
        for dependency in self.dependencies:
            if not Path(dependency).is_dir():
                raise ValidationError("dependencies", dependency, "no such directory")
        name = self._job_name(job_name)
        output_path = self._output_path(store)
        code_location = _absolute(self.code_location, "code_location") if self.code_location else output_path
        checkpoints = _absolute(self.checkpoint_s3_uri, "checkpoint_s3_uri") if self.checkpoint_s3_uri else None
        for field, uri in (("output_path", output_path), ("code_location", code_location),
                           ("checkpoint_s3_uri", checkpoints)):
            if uri:
                _check_writable(field, uri)
        from shipyard.storage.uri import join

        code_uri = join(code_location, name, "source", "sourcedir.tar.gz")
        user = {**self._hyperparameters, **self._framework_hyperparameters(name, output_path)}
        # A built-in algorithm gets only the user's, as SageMaker gives them (there is no code to point at).
        hyperparameters = self._encode(user) if algorithm else {
            **self._encode(user),
            **hp.encode_json({
                "sagemaker_program": program,
                "sagemaker_submit_directory": code_uri,
                "sagemaker_container_log_level": self.container_log_level,
                "sagemaker_job_name": name,
                "sagemaker_region": "local",
                **dist.to_hyperparameters(self._enabled_distribution, self._distribution_type(),
                                          self._distribution_groups),
            }),
        }
        job_channels = channels(inputs, check_input_mode(self.input_mode))  # the estimator's mode named first
        sized = ("instance_type", "instance_count") if self.instance_groups else ()   # the groups size the job
        spec = build_model(JobSpec, "job", **{
            **{name: getattr(self, name) for name in SPEC_ARGUMENTS if name not in sized},
            "job_name": name, "hyperparameters": hyperparameters, "channels": job_channels,
            "input_mode": job_input_mode(inputs, self.input_mode),
            "framework": self.framework, "algorithm": algorithm, "output_path": output_path,
            "metric_definitions": tuple(_metric(i, m) for i, m in enumerate(self.metric_definitions)),
            "tags": tuple(self.tags),
            "checkpoint_s3_uri": checkpoints,
        })
        return spec

    def _distribution_type(self) -> str:
        """The instance type the launcher runs on: its group's, in a heterogeneous job."""
        for group in self.instance_groups:
            if group.instance_group_name in self._distribution_groups:
                return group.instance_type
        return self.instance_type

    def plan(self, inputs: Any = None, job_name: str | None = None) -> list:
        """What fit() would run on each instance, without running or writing anything. Planning also
        checks that this machine can provide the instances (CapacityError otherwise)."""
        from shipyard.control.planning import plan_job

        store = self._store()
        spec = self._spec(inputs, job_name, store)
        return plan_job(spec, store.job_dir(spec.job_name))

    def expected_cost(self) -> str:
        """What a job of this estimator costs per hour, at most in max_run, and what max_cost buys (the
        catalog's prices; shipyard's own, said by fit() and `run --dry-run` too)."""
        from shipyard.control.billing import expectation, prices

        store = self._store()
        return expectation(self._spec(None, None, store), prices())

    def fit(self, inputs: Any = None, wait: bool = True, logs: Any = "All", job_name: str | None = None,
            experiment_config: Any = None) -> None:
        from shipyard.control.submit import submit
        from shipyard.sdk.watch import Transfers, log_console

        store = self._store()
        spec = self._spec(inputs, job_name, store)
        # On stderr: `shipyard run --detach` prints only the job's name on stdout.
        with Transfers(log_console(stderr=True, quiet=logs in (False, None, "None"))) as transfers:
            submit(store, spec, None if spec.algorithm else self._pack, transfers.reporter("upload code"))
        self._current_job_name = spec.job_name
        self.latest_training_job = (ClusterTrainingJob(spec.job_name) if spec.controller == "cluster"
                                    else TrainingJob(spec.job_name, store))
        self.jobs.append(self.latest_training_job)
        if wait:
            self.latest_training_job.wait(logs=logs)

    def _pack(self, directory: Path) -> Path:
        """Write the job's sourcedir.tar.gz (entry point, source dir, dependencies) into `directory`."""
        from shipyard.storage import archive

        entry, source, _ = self._source()
        return archive.pack_source(directory / "sourcedir.tar.gz", entry.relative_to(source) if source else entry,
                                   source, [Path(d) for d in self.dependencies],
                                   follow_symlinks=bool(self.follow_symlinks))

    # -- attach ------------------------------------------------------------------------------
    @classmethod
    def attach(cls, training_job_name: str, sagemaker_session: Any = None, model_channel_name: str = "model",
               wait: bool = True) -> EstimatorBase:
        """Rebuild the estimator of an existing job (from any process). Like SageMaker's, it waits for
        the job to finish unless wait=False; unlike SageMaker's, metric definitions are restored."""
        from shipyard.control import cluster_home as home
        from shipyard.store import Store

        store = Store()
        if home.holds(store, training_job_name):
            # Its controller lives on the Ray cluster's head, and its record with it.
            estimator = cls._from_spec(JobSpec.model_validate_json(home.spec_json(training_job_name)))
            estimator.latest_training_job = ClusterTrainingJob(training_job_name)
        else:
            estimator = cls._from_spec(store.get_job(training_job_name).spec)
            estimator.latest_training_job = TrainingJob(training_job_name, store)
        estimator._current_job_name = training_job_name
        estimator.jobs = [estimator.latest_training_job]
        if wait:
            estimator.latest_training_job.wait(logs="None", quiet=True)
        return estimator

    @classmethod
    def _from_spec(cls, spec: JobSpec) -> EstimatorBase:
        """The estimator that made `spec` (a job's, or a tuning job's training definition)."""
        decoded = hp.decode(spec.hyperparameters)
        user, framework = hp.split(decoded)
        user.pop(OBJECTIVE_HYPERPARAMETER, None)  # a trial's, added by its tuning job (as SageMaker's attach)
        estimator = cls.__new__(cls)
        # Files that lived on the submitting machine are not checked again.
        estimator._assign({
            **{name: getattr(spec, name) for name in SPEC_ARGUMENTS},
            "metric_definitions": [{"Name": m.name, "Regex": m.regex} for m in spec.metric_definitions],
            "debugger_hook_config": spec.debugger_hook_config or False,
            "entry_point": decoded.get("sagemaker_program"), "hyperparameters": user,
            "source_dir": decoded.get("sagemaker_submit_directory"), "base_job_name": base_of(spec.job_name),
            "container_log_level": decoded.get("sagemaker_container_log_level"),
            "distribution": dist.from_hyperparameters(framework) or None,
        })
        return estimator


def _instance_groups(value: Any) -> tuple[InstanceGroupSpec, ...]:
    """instance_groups= as the job's: InstanceGroup objects, dicts of their fields (a job file) or the spec's."""
    if not value:
        return ()
    if isinstance(value, (str, dict)) or not hasattr(value, "__iter__"):
        raise ValidationError("instance_groups", value, "give a list of InstanceGroup(name, instance_type, "
                              "instance_count), from shipyard.instance_group")
    groups = []
    for i, group in enumerate(value):
        if isinstance(group, InstanceGroupSpec):
            groups.append(group)
            continue
        names = ("instance_group_name", "instance_type", "instance_count")
        if not isinstance(group, dict) and not all(hasattr(group, name) for name in names):
            raise ValidationError(f"instance_groups[{i}]", group, "give InstanceGroup(instance_group_name, "
                                  "instance_type, instance_count), from shipyard.instance_group")
        fields = group if isinstance(group, dict) else {name: getattr(group, name) for name in names}
        groups.append(build_model(InstanceGroupSpec, f"instance_groups[{i}]", **fields))
    return tuple(groups)


def _distribution_groups(distribution: Any, enabled: dict, groups: tuple[InstanceGroupSpec, ...]) -> list[str]:
    """The group that runs the launcher (SageMaker's fw_utils rules): the one named, else the only group."""
    named = dist.groups(distribution)
    if named and not enabled:
        raise ValidationError("distribution.instance_groups", named, "names a group but no strategy is enabled; "
                              "enable one (e.g. 'torch_distributed': {'enabled': True}) or remove instance_groups")
    if not named and enabled and len(groups) == 1:
        return [groups[0].instance_group_name]
    if not named and enabled and groups:
        raise ValidationError("distribution.instance_groups", None, "a heterogeneous job names the group that runs "
                              f"{', '.join(enabled)}: add 'instance_groups': [group] (one of "
                              f"{', '.join(g.instance_group_name for g in groups)})")
    return named


def _profiler_config(value: Any, disable_profiler: bool) -> ProfilerConfig | None:
    """profiler_config= (a ProfilerConfig or a dict of its fields); disable_profiler=True turns it off."""
    if isinstance(value, dict):
        value = build_model(ProfilerConfig, "profiler_config", **value)
    elif value is not None and not isinstance(value, ProfilerConfig):
        raise ValidationError("profiler_config", value, "give a shipyard.profiler.ProfilerConfig or a dict of its fields")
    if value is not None and disable_profiler:
        value = value.model_copy(update={"disable_profiler": True})
    return value


def _log_level(value: Any) -> int:
    """container_log_level as the toolkit takes it: a logging level, given as a number or a name."""
    import logging

    if isinstance(value, str) and value.upper() in logging.getLevelNamesMapping():
        return logging.getLevelNamesMapping()[value.upper()]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= logging.CRITICAL:
        return value
    raise ValidationError("container_log_level", value, "give a logging level: logging.INFO (20), 'DEBUG', "
                          "'INFO', 'WARNING', 'ERROR' or 'CRITICAL'")


def _metric(index: int, definition: Any) -> MetricDefinition:
    field = f"metric_definitions[{index}]"
    if not isinstance(definition, dict):
        raise ValidationError(field, definition, "give a dict {'Name': ..., 'Regex': ...}")
    return build_model(MetricDefinition, field, **definition)


def _check_writable(field: str, uri: str) -> None:
    from shipyard.storage.uri import check_writable

    try:
        check_writable(uri)
    except ShipyardError as exc:
        raise ValidationError(field, uri, str(exc).removeprefix(f"{uri}: ")) from None


class Estimator(EstimatorBase):
    """The generic estimator (script mode): hyperparameters are JSON-encoded only with a source_dir,
    as SageMaker's generic Estimator does."""

    json_hyperparameters = False


class Framework(EstimatorBase):
    """Base of the framework estimators: checks the installed framework against framework_version."""

    framework_package: tuple[str, ...] = ()

    def _check_framework_version(self) -> None:
        check_installed("framework_version", self.framework_version, self.framework_package)


def check_installed(argument: str, version: str | None, packages: tuple[str, ...]) -> None:
    """Warn when the first of `packages` installed here is not at the `version` an argument asks for."""
    import warnings
    from importlib import metadata

    if not version or not packages:
        return
    for package in packages:
        try:
            installed = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
        wanted = str(version).split(".")
        if installed.split("+")[0].split(".")[: len(wanted)] != wanted:
            warnings.warn(f"{argument}={version!r}, but this machine has {package} {installed}; the job runs with "
                          f"{package} {installed}", stacklevel=5)
        return
    warnings.warn(f"{argument}={version!r}, but {packages[0]} is not installed here; the script will fail to "
                  "import it", stacklevel=5)

