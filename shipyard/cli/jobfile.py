"""What `shipyard run` submits: a job.yaml (the Estimator's arguments plus `inputs`, `framework`,
`job_name`), the command-line options that override it, and the estimator built from both.

Relative paths in a job.yaml are relative to the file's directory; on the command line, to the current
directory. Either way they are made absolute here, because the controller and the instances do not run
in the directory the user typed them in."""

from __future__ import annotations

import json
import math
import os
import types
import typing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, BeforeValidator, ConfigDict, field_validator, model_validator

from shipyard.errors import ValidationError, unknown_name_error
from shipyard.registry import Registry
from shipyard.sdk.arguments import DEPRECATED, MEANINGLESS_HERE, NOT_YET, SDK_ARGUMENTS, SPEC_ARGUMENTS
from shipyard.spec.job import JobSpec

FRAMEWORKS = Registry("frameworks", "framework", {
    "pytorch": "shipyard.sdk.frameworks:PyTorch",
    "tensorflow": "shipyard.sdk.frameworks:TensorFlow",
    "sklearn": "shipyard.sdk.frameworks:SKLearn",
    "xgboost": "shipyard.sdk.frameworks:XGBoost",
    "huggingface": "shipyard.sdk.frameworks:HuggingFace",
    "none": "shipyard.sdk.estimator:Estimator",
})
DEFAULT_FRAMEWORK = "pytorch"
# The estimator a job gets when it names no framework and its image_uri is of this kind (spec/images.py),
# with no entry point: a built-in algorithm's image is trained by the generic Estimator, as on SageMaker.
IMAGE_FRAMEWORKS = {"algorithm": "none"}
# Arguments only one framework's estimator takes, beyond the Estimator's: key -> that framework.
FRAMEWORK_ARGUMENTS = {"model_dir": "tensorflow", "transformers_version": "huggingface",
                       "pytorch_version": "huggingface", "tensorflow_version": "huggingface"}
CHANNEL_DISTRIBUTIONS = ("FullyReplicated", "ShardedByS3Key")
# SageMaker arguments a migrated file may carry: handed to the estimator, which warns or refuses.
PASSTHROUGH = MEANINGLESS_HERE | set(NOT_YET) | set(DEPRECATED)


# -- job.yaml ---------------------------------------------------------------------------------------
def _text(value: Any) -> Any:
    """YAML reads `framework_version: 2.1` and `FOO: 1` as numbers; they are strings here."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return str(value)
    return value


Text = Annotated[str, BeforeValidator(_text)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


# A channel's keys that only a FileSystemInput has (content_type both have).
FILE_SYSTEM_KEYS = frozenset({"file_system_id", "file_system_type", "directory_path", "file_system_access_mode"})


class InputFile(_Frozen):
    """One channel: TrainingInput's fields, or FileSystemInput's."""

    s3_data: str | None = None
    distribution: Literal["FullyReplicated", "ShardedByS3Key"] | None = None
    compression: str | None = None
    content_type: str | None = None
    record_wrapping: str | None = None
    s3_data_type: str | None = None
    instance_groups: list[str] | None = None
    input_mode: str | None = None
    attribute_names: list[str] | None = None
    target_attribute_name: str | None = None
    shuffle_config: Any = None
    file_system_id: str | None = None
    file_system_type: str | None = None
    directory_path: str | None = None
    file_system_access_mode: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> InputFile:
        if (self.s3_data is None) == (self.directory_path is None):
            raise ValueError("give the channel's s3_data (a URI or path), or a file system's file_system_id, "
                             "file_system_type and directory_path; not both")
        given = {k for k, v in self if v is not None}
        wrong = sorted(given - FILE_SYSTEM_KEYS - {"content_type"} if self.directory_path else given & FILE_SYSTEM_KEYS)
        if wrong:
            raise ValueError(f"{wrong[0]} does not go with {'directory_path' if self.directory_path else 's3_data'}; "
                             "a channel is either a TrainingInput or a FileSystemInput")
        return self


class _JobFileBase(_Frozen):
    """The documented job.yaml schema: the Estimator's arguments (same names) plus our own `framework`,
    `job_name`, `inputs` (fit()'s), and one framework's own arguments (FRAMEWORK_ARGUMENTS)."""

    framework: str | None = None     # a name in FRAMEWORKS
    job_name: str | None = None
    inputs: dict[str, InputFile] | None = None
    model_dir: Any = None             # TensorFlow only
    transformers_version: Text | None = None   # HuggingFace only, as its three versions
    pytorch_version: Text | None = None
    tensorflow_version: Text | None = None

    @field_validator("framework")
    @classmethod
    def _framework(cls, value: str | None) -> str | None:
        if value is not None and value not in FRAMEWORKS:
            raise ValueError(unknown_name_error("framework", value, FRAMEWORKS).fix)
        return value

    @field_validator("inputs", mode="before")
    @classmethod
    def _uris(cls, value: Any) -> Any:
        """`inputs: URI` is the 'training' channel and `name: URI` is `name: {s3_data: URI}`, as fit()."""
        if isinstance(value, str):
            value = {"training": value}
        if isinstance(value, dict):
            return {k: {"s3_data": v} if isinstance(v, str) else v for k, v in value.items()}
        return value


def _file_form(annotation: Any) -> Any:
    """How a job.yaml writes a spec field: YAML lists for tuples, numbers and booleans as text where
    the spec wants text (`framework_version: 2.1`), and nested models as given (the SDK builds them,
    naming the argument)."""
    args = typing.get_args(annotation)
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return _file_form(next(a for a in args if a is not type(None)))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return Any
    if typing.get_origin(annotation) is tuple:
        return list[_file_form(args[0])]
    if typing.get_origin(annotation) is dict:
        return dict[args[0], _file_form(args[1])]
    return Text if annotation is str else annotation


JobFile = pydantic.create_model(
    "JobFile", __base__=_JobFileBase,
    **{name: (_file_form(JobSpec.model_fields[name].annotation) | None, None) for name in SPEC_ARGUMENTS},
    **{name: (argument.file_form | None, None) for name, argument in SDK_ARGUMENTS.items()},
)


TOP_LEVEL_NAMES = frozenset(JobFile.model_fields) | PASSTHROUGH


@dataclass(frozen=True)
class JobRequest:
    """Everything `run` needs: which estimator, its arguments, fit()'s inputs and job name."""

    framework: str | None = None
    job_name: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)


def load(path: str | Path) -> JobRequest:
    path = Path(path)
    return from_mapping(read(path), str(path), path.resolve().parent)


def loads(text: str, label: str, base: Path) -> JobRequest:
    """A job file's text (the server's submit); relative paths are relative to base."""
    return from_mapping(_parse(text, label), label, base)


def read(path: Path) -> Any:
    """A YAML file's content, with its problems as our errors naming the file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ValidationError("job file", str(path), "no such file") from None
    except Exception as exc:  # a directory, unreadable bytes
        raise ValidationError("job file", str(path), f"cannot be read as YAML: {exc}") from None
    return _parse(text, str(path))


def _parse(text: str, label: str) -> Any:
    try:
        return _load_yaml(text)
    except ValidationError as exc:
        raise ValidationError(f"{label}: {exc.field}", exc.value, exc.fix) from None
    except Exception as exc:  # yaml.YAMLError
        raise ValidationError("job file", label, f"cannot be read as YAML: {exc}") from None


def from_mapping(raw: Any, label: str, base: Path) -> JobRequest:
    """A job file's content (label names it in errors; relative paths are relative to base)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ValidationError("job file", label, "must be a mapping of Estimator arguments to values")
    for key in raw:
        if not isinstance(key, str) or key not in TOP_LEVEL_NAMES:
            raise unknown_name_error(f"{label}: key", str(key), TOP_LEVEL_NAMES - set(DEPRECATED))
    passthrough = {k: v for k, v in raw.items() if k in PASSTHROUGH}
    try:
        model = JobFile.model_validate({k: v for k, v in raw.items() if k not in PASSTHROUGH})
    except pydantic.ValidationError as exc:
        raise _translate(label, exc) from None
    values = model.model_dump(exclude_unset=True)
    inputs = {name: {k: v for k, v in item.items() if v is not None}
              for name, item in (values.pop("inputs", None) or {}).items()}
    request = JobRequest(framework=values.pop("framework", None), job_name=values.pop("job_name", None),
                         arguments={**values, **passthrough}, inputs=inputs)
    return _resolve(request, base)


def _load_yaml(text: str) -> Any:
    """yaml.safe_load, except that a key given twice in one mapping is an error (YAML keeps the last,
    so a second `train:` channel would silently replace the first)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        keys = [loader.construct_object(key, deep=deep) for key, _ in node.value]
        repeated = sorted({str(k) for k in keys if keys.count(k) > 1})
        if repeated:
            raise ValidationError("key", repeated[0], f"given twice (line {node.start_mark.line + 1}); "
                                  "a key may appear once in a mapping")
        return loader.construct_mapping(node, deep=deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return yaml.load(text, Loader=Loader)  # noqa: S506 (a SafeLoader)


def _translate(label: str, exc: pydantic.ValidationError) -> ValidationError:
    """pydantic's error as ours: the key, the value, the fix; a misspelled key gets the closest one."""
    errors = exc.errors()
    extra = next((e for e in errors if e["type"] == "extra_forbidden"), None)
    if extra is not None:
        *where, key = (str(p) for p in extra["loc"])
        # The only nested model is a channel of `inputs`.
        valid = InputFile.model_fields if where else TOP_LEVEL_NAMES
        return unknown_name_error(f"{label}: key in {'.'.join(where)}", key, valid)
    error = max(errors, key=lambda e: len(e["loc"]))
    where = ".".join(str(p) for p in error["loc"])
    return ValidationError(f"{label}: {where}", error.get("input"), error["msg"].removeprefix("Value error, "))


def _absolute(path: str, base: Path) -> str:
    """A plain local path made absolute against base; URIs (s3://, file://) are left as they are (a
    mistyped one too, for the SDK to name)."""
    from shipyard.storage.uri import looks_like_uri

    if looks_like_uri(path):
        return path
    return os.path.normpath(base / Path(path).expanduser())


def _resolve(request: JobRequest, base: Path) -> JobRequest:
    args = dict(request.arguments)
    if isinstance(args.get("source_dir"), str):
        args["source_dir"] = _absolute(args["source_dir"], base)
    elif isinstance(args.get("entry_point"), str):
        # With a source_dir the entry point is relative to it, as in SageMaker.
        args["entry_point"] = _absolute(args["entry_point"], base)
    if args.get("dependencies"):
        args["dependencies"] = [_absolute(d, base) for d in args["dependencies"]]
    for key in ("output_path", "code_location", "checkpoint_s3_uri"):
        if isinstance(args.get(key), str):
            args[key] = _absolute(args[key], base)
    paths = ("s3_data", "directory_path")
    inputs = {name: {**item, **{key: _absolute(item[key], base) for key in paths if key in item}}
              for name, item in request.inputs.items()}
    return replace(request, arguments=args, inputs=inputs)


# -- command-line options ---------------------------------------------------------------------------
def parse_value(text: str) -> Any:
    """A hyperparameter value: JSON when it parses (3, 0.01, true, [1,2]), else the string as typed."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, float) and not math.isfinite(value):
        return text  # NaN/Infinity are not JSON; keep what was typed
    return value


def parse_pair(option: str, text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValidationError(option, text, "use KEY=VALUE")
    return key.strip(), value


def parse_channel(text: str) -> tuple[str, dict[str, Any]]:
    """`name=URI` or `name=URI:ShardedByS3Key` (or `:FullyReplicated`)."""
    name, uri = parse_pair("--channel", text)
    item: dict[str, Any] = {}
    head, sep, tail = uri.rpartition(":")
    if sep and tail in CHANNEL_DISTRIBUTIONS:
        uri, item["distribution"] = head, tail
    elif sep and head and tail.isalpha():  # a misspelt mode would otherwise end the channel's path
        raise unknown_name_error(f"--channel {name}: distribution", tail, CHANNEL_DISTRIBUTIONS)
    if not uri:
        raise ValidationError("--channel", text, "give the channel's URI, e.g. train=s3://bucket/train")
    item["s3_data"] = _absolute(uri, Path.cwd())
    return name, item


@dataclass(frozen=True)
class RunOptions:
    """`shipyard run`'s job options; None (or empty) means not given, so the file's value stands."""

    source_dir: str | None = None
    instance_count: int | None = None
    instance_type: str | None = None
    distribution: str | None = None
    processes_per_host: int | None = None
    hyperparameters: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    sharded: tuple[str, ...] = ()
    input_mode: str | None = None
    output_path: str | None = None
    metrics: tuple[str, ...] = ()
    environment: tuple[str, ...] = ()
    max_run: int | None = None
    job_name: str | None = None
    base_job_name: str | None = None
    framework: str | None = None
    oversubscribe: bool | None = None
    stop_grace_seconds: float | None = None
    use_spot_instances: bool | None = None
    max_wait: int | None = None
    max_cost: float | None = None
    checkpoint_s3_uri: str | None = None
    spot_without_checkpoints: bool | None = None
    max_retry_attempts: int | None = None
    backend: str | None = None
    controller: str | None = None
    follow_symlinks: bool | None = None
    keep_alive_period_in_seconds: int | None = None
    instance_groups: tuple[str, ...] = ()
    distribution_group: str | None = None


def parse_instance_group(text: str) -> dict[str, Any]:
    """`name=TYPE:COUNT` (--instance-group) as an InstanceGroup's fields."""
    name, value = parse_pair("--instance-group", text)
    instance_type, sep, count = value.rpartition(":")
    if not sep or not instance_type or not count.strip().isdigit():
        raise ValidationError("--instance-group", text, "use NAME=INSTANCE_TYPE:COUNT, e.g. train=local:2")
    return {"instance_group_name": name, "instance_type": instance_type, "instance_count": int(count)}


def build_request(target: str, options: RunOptions) -> JobRequest:
    """The job file (or the entry point) with the options applied on top."""
    if target.endswith((".yaml", ".yml")):
        request = load(target)
    else:
        request = JobRequest(arguments={"entry_point": target})
    return apply_options(request, options)


def apply_options(request: JobRequest, options: RunOptions) -> JobRequest:
    args = dict(request.arguments)
    cwd = Path.cwd()
    scalars = {
        "source_dir": _absolute(options.source_dir, cwd) if options.source_dir else None,
        "instance_count": options.instance_count, "instance_type": options.instance_type,
        "output_path": _absolute(options.output_path, cwd) if options.output_path else None,
        "max_run": options.max_run, "base_job_name": options.base_job_name,
        "oversubscribe": options.oversubscribe, "stop_grace_seconds": options.stop_grace_seconds,
        "use_spot_instances": options.use_spot_instances, "max_wait": options.max_wait,
        "max_cost": options.max_cost,
        "checkpoint_s3_uri": _absolute(options.checkpoint_s3_uri, cwd) if options.checkpoint_s3_uri else None,
        "max_retry_attempts": options.max_retry_attempts, "backend": options.backend,
        "controller": options.controller,
        "spot_without_checkpoints": options.spot_without_checkpoints, "follow_symlinks": options.follow_symlinks,
        "keep_alive_period_in_seconds": options.keep_alive_period_in_seconds, "input_mode": options.input_mode,
    }
    args.update({k: v for k, v in scalars.items() if v is not None})
    if options.hyperparameters:
        pairs = [parse_pair("--hp", text) for text in options.hyperparameters]
        args["hyperparameters"] = {**(args.get("hyperparameters") or {}),
                                   **{k: parse_value(v) for k, v in pairs}}
    if options.environment:
        args["environment"] = {**(args.get("environment") or {}),
                               **dict(parse_pair("--env", text) for text in options.environment)}
    if options.metrics:
        args["metric_definitions"] = _merge_metrics(args.get("metric_definitions") or [], options.metrics)
    if options.distribution:
        args["distribution"] = {options.distribution: {"enabled": True}}
    if options.processes_per_host is not None:
        args["distribution"] = _with_processes(args.get("distribution"), options.processes_per_host)
    if options.instance_groups:
        args["instance_groups"] = [parse_instance_group(text) for text in options.instance_groups]
    if options.distribution_group:
        if not args.get("distribution"):
            raise ValidationError("--distribution-group", options.distribution_group,
                                  "needs a distribution strategy, e.g. --distribution torch_distributed")
        distribution = args["distribution"]
        distribution = {distribution: {"enabled": True}} if isinstance(distribution, str) else dict(distribution)
        args["distribution"] = {**distribution, "instance_groups": [options.distribution_group]}
    if isinstance(args.get("entry_point"), str) and args.get("source_dir"):
        args["entry_point"] = _in_source_dir(args["entry_point"], args["source_dir"])
    request = replace(request, framework=options.framework or request.framework, arguments=args)
    framework = framework_of(request)
    for key in [k for k in args if k in FRAMEWORK_ARGUMENTS]:   # in the file's order: the first is named
        if FRAMEWORK_ARGUMENTS[key] != framework:
            raise ValidationError(key, args[key], f"only the {FRAMEWORK_ARGUMENTS[key]} framework takes {key}; "
                                  f"give framework: {FRAMEWORK_ARGUMENTS[key]} (or --framework)")
    return JobRequest(framework=framework, job_name=options.job_name or request.job_name, arguments=args,
                      inputs=_merge_inputs(request.inputs, options.channels, options.sharded))


def framework_of(request: JobRequest) -> str:
    """The framework the request names; else the one its image implies (IMAGE_FRAMEWORKS for an algorithm run
    without an entry point, the image's framework for a script); else the default.
    A built-in algorithm's image under a framework estimator is an error naming `framework`."""
    image, entry_point = request.arguments.get("image_uri"), request.arguments.get("entry_point")
    if not isinstance(image, str):
        return request.framework or DEFAULT_FRAMEWORK
    from shipyard.spec.images import resolve

    found = resolve(image)
    if entry_point or found.kind != "algorithm":   # a script runs: with the framework the image runs it with
        return request.framework or found.framework or DEFAULT_FRAMEWORK
    implied = IMAGE_FRAMEWORKS[found.kind]
    if request.framework not in (None, implied):
        raise ValidationError("framework", request.framework, f"image_uri {image} is a built-in algorithm's, run "
                              f"with no entry_point by framework: {implied}; remove framework, or give the "
                              "entry_point of a script to run")
    return implied


def _merge_metrics(defined: list[dict[str, str]], texts: tuple[str, ...]) -> list[dict[str, str]]:
    """`--metric name=regex` replaces the file's definition of that name, or adds one."""
    metrics = [dict(m) for m in defined]
    for text in texts:
        name, regex = parse_pair("--metric", text)
        metrics = [m for m in metrics if (m.get("Name") or m.get("name")) != name]
        metrics.append({"Name": name, "Regex": regex})
    return metrics


def _with_processes(distribution: Any, count: int) -> dict[str, Any]:
    if isinstance(distribution, str):
        distribution = {distribution: {"enabled": True}}
    enabled = [k for k, v in (distribution or {}).items() if isinstance(v, dict) and v.get("enabled")]
    if not enabled:
        raise ValidationError("--processes-per-host", count,
                              "needs a distribution strategy, e.g. --distribution torch_distributed")
    return {k: {**v, "processes_per_host": count} if k in enabled else v for k, v in distribution.items()}


def _in_source_dir(entry_point: str, source_dir: str) -> str:
    """`src/train.py --source-dir src` (as a shell completes it) means train.py inside src."""
    source = Path(source_dir.removeprefix("file://")).expanduser()
    if (source / entry_point).is_file() or not Path(entry_point).is_file():
        return entry_point
    try:
        return str(Path(entry_point).resolve().relative_to(source.resolve()))
    except ValueError:
        return entry_point


def _merge_inputs(inputs: dict[str, dict[str, Any]], channels: tuple[str, ...],
                  sharded: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    merged = dict(inputs)
    for text in channels:
        name, item = parse_channel(text)
        merged[name] = item
    for name in sharded:
        if name not in merged:
            raise unknown_name_error("--sharded", name, merged) if merged else ValidationError(
                "--sharded", name, "no such channel; give it with --channel NAME=URI")
        merged[name] = {**merged[name], "distribution": "ShardedByS3Key"}
    return merged


# -- the estimator ----------------------------------------------------------------------------------
def make_estimator(request: JobRequest):
    return FRAMEWORKS.load(framework_of(request))(**request.arguments)


def fit_inputs(request: JobRequest) -> dict | None:
    """fit()'s `inputs`: channel name -> TrainingInput, or FileSystemInput."""
    from shipyard.sdk.inputs import FileSystemInput, TrainingInput

    if not request.inputs:
        return None
    return {name: FileSystemInput(**item) if "directory_path" in item else TrainingInput(**item)
            for name, item in request.inputs.items()}
