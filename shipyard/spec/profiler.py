"""ProfilerConfig and FrameworkProfile: SageMaker's profiler configuration (sagemaker.debugger), with its
names, allowed values and defaults, validated when made. `to_api()` gives the CreateTrainingJob shape
(ProfilerConfig in describe) and what the agent writes to /opt/ml/input/config/profilerconfig.json."""

from __future__ import annotations

import json
import re
from enum import Enum
from typing import ClassVar

from pydantic import Field, field_validator, model_validator

from shipyard.spec.build import UserModel

ALLOWED_INTERVALS_MILLIS = (100, 200, 500, 1000, 5000, 60000)
DEFAULT_INTERVAL_MILLIS = 500
DEFAULT_LOCAL_PATH = "/opt/ml/output/profiler"


class PythonProfiler(str, Enum):
    """sagemaker.debugger.PythonProfiler (plain strings work as well)."""

    CPROFILE = "cprofile"
    PYINSTRUMENT = "pyinstrument"


class cProfileTimer(str, Enum):  # noqa: N801 (SageMaker's name)
    """sagemaker.debugger.cProfileTimer: what cProfile measures (default: cycle the other three over the steps)."""

    TOTAL_TIME = "total_time"
    CPU_TIME = "cpu_time"
    OFF_CPU_TIME = "off_cpu_time"
    DEFAULT = "default"


PYTHON_PROFILERS = tuple(p.value for p in PythonProfiler)
CPROFILE_TIMERS = tuple(t.value for t in cProfileTimer)


def _one_of(field: str, value, allowed: tuple[str, ...]) -> str:
    """A name from `allowed`, in any case (an enum member such as PythonProfiler.CPROFILE gives its value)."""
    name = getattr(value, "value", value)
    if not isinstance(name, str) or name.lower() not in allowed:
        raise ValueError(f"{field} must be one of {', '.join(allowed)} (got {value!r})")
    return name.lower()


class _Range(UserModel):
    """A step range (start_step/num_steps) or a time range (start_unix_time/duration): they exclude each
    other."""

    start_step: int | None = Field(default=None, ge=0)
    num_steps: int | None = Field(default=None, ge=1)
    start_unix_time: float | None = Field(default=None, ge=0)
    duration: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_range(self):
        if self.has_step_range and self.has_time_range:
            raise ValueError("give either start_step/num_steps or start_unix_time/duration, not both")
        return self

    @property
    def has_step_range(self) -> bool:
        return self.start_step is not None or self.num_steps is not None

    @property
    def has_time_range(self) -> bool:
        return self.start_unix_time is not None or self.duration is not None

    def in_range(self, step: int, now: float) -> bool:
        """Whether this step (starting at `now`) is in the range: every step when no range is given."""
        if self.has_step_range:
            start = self.start_step or 0
            return step >= start and (self.num_steps is None or step < start + self.num_steps)
        if self.has_time_range:
            start = self.start_unix_time or 0.0
            return now >= start and (self.duration is None or now < start + self.duration)
        return True

    def range_api(self) -> dict:
        """SageMaker's StepRange / TimeRange JSON."""
        if self.has_step_range:
            return {"StartStep": self.start_step, "NumSteps": self.num_steps}
        out = {}
        if self.start_unix_time is not None:
            out["StartTimeInSecSinceEpoch"] = self.start_unix_time
        if self.duration is not None:
            out["Duration"] = self.duration
        return out


class _ProfilingOption(_Range):
    """SageMaker's MetricsConfigBase: one profiling option over its own range. With no range (or
    profile_default_steps=True) the option's default steps; a start_step alone profiles 1 step, a
    num_steps alone starts at step 0 (sagemaker.debugger.metrics_config.StepRange)."""

    API_NAME: ClassVar[str]
    DEFAULT_START_STEP: ClassVar[int]
    DEFAULT_NUM_STEPS: ClassVar[int] = 1
    POSITIONAL: ClassVar[tuple[str, ...]] = ("start_step", "num_steps", "start_unix_time", "duration",
                                             "profile_default_steps")
    profile_default_steps: bool = False

    @model_validator(mode="before")
    @classmethod
    def _default_steps(cls, data):
        if not isinstance(data, dict):
            return data
        data = dict(data)
        ranged = any(data.get(k) is not None for k in ("start_step", "num_steps", "start_unix_time", "duration"))
        if data.get("profile_default_steps") is True or not ranged:
            data.update(start_step=cls.DEFAULT_START_STEP, num_steps=cls.DEFAULT_NUM_STEPS,
                        start_unix_time=None, duration=None)
        elif data.get("start_step") is None and data.get("num_steps") is not None:
            data["start_step"] = 0
        elif data.get("start_step") is not None and data.get("num_steps") is None:
            data["num_steps"] = 1
        return data

    def to_api(self) -> dict:
        return self.range_api()


class DetailedProfilingConfig(_ProfilingOption):
    """torch.profiler over the steps (default: step 5), exported as Chrome traces."""

    API_NAME: ClassVar[str] = "DetailedProfilingConfig"
    DEFAULT_START_STEP: ClassVar[int] = 5


class DataloaderProfilingConfig(_ProfilingOption):
    """The DataLoader's events over the steps (default: step 7), those whose name matches metrics_regex."""

    API_NAME: ClassVar[str] = "DataloaderProfilingConfig"
    DEFAULT_START_STEP: ClassVar[int] = 7
    POSITIONAL: ClassVar[tuple[str, ...]] = (*_ProfilingOption.POSITIONAL, "metrics_regex")
    metrics_regex: str = ".*"

    @field_validator("metrics_regex")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"metrics_regex must be a valid regular expression ({exc})") from None
        return value

    def to_api(self) -> dict:
        return {**self.range_api(), "MetricsRegex": self.metrics_regex}


class PythonProfilingConfig(_ProfilingOption):
    """cProfile or pyinstrument, one profile per step (default: steps 9 to 11; with profile_default_steps
    the cProfile timer cycles total_time, cpu_time, off_cpu_time over the steps). The timer is cProfile's
    only: pyinstrument samples the wall clock."""

    API_NAME: ClassVar[str] = "PythonProfilingConfig"
    DEFAULT_START_STEP: ClassVar[int] = 9
    DEFAULT_NUM_STEPS: ClassVar[int] = 3
    POSITIONAL: ClassVar[tuple[str, ...]] = (*_ProfilingOption.POSITIONAL, "python_profiler", "cprofile_timer")
    python_profiler: str = "cprofile"
    cprofile_timer: str = "total_time"

    @field_validator("python_profiler", mode="before")
    @classmethod
    def _profiler(cls, value) -> str:
        return _one_of("python_profiler", value, PYTHON_PROFILERS)

    @field_validator("cprofile_timer", mode="before")
    @classmethod
    def _timer(cls, value) -> str:
        return _one_of("cprofile_timer", value, CPROFILE_TIMERS)

    @model_validator(mode="before")
    @classmethod
    def _timer_of_default_steps(cls, data):
        if isinstance(data, dict) and data.get("profile_default_steps") is True:
            data = {**data, "cprofile_timer": "default"}
        return data

    def to_api(self) -> dict:
        api = {**self.range_api(), "ProfilerName": self.python_profiler}
        if self.python_profiler == "cprofile":
            api["cProfileTimer"] = self.cprofile_timer
        return api


# The profiling options, by the name the recorder uses, and FrameworkProfile's field for each.
OPTIONS = {"detailed": DetailedProfilingConfig, "dataloader": DataloaderProfilingConfig,
           "python": PythonProfilingConfig}


class FrameworkProfile(_Range):
    """Framework metrics. The global range (start_step/num_steps, or start_unix_time/duration) says which
    steps the step timeline records (every step when none is given); the profiling options follow
    SageMaker's precedence (`options()`). Trace files rotate every file_close_interval seconds or
    file_max_size bytes."""

    local_path: str = DEFAULT_LOCAL_PATH
    file_max_size: int = Field(default=10485760, ge=1)
    file_close_interval: float = Field(default=60, gt=0)
    file_open_fail_threshold: int = Field(default=50, ge=1)
    detailed_profiling_config: DetailedProfilingConfig | None = None
    dataloader_profiling_config: DataloaderProfilingConfig | None = None
    python_profiling_config: PythonProfilingConfig | None = None

    def options(self) -> dict[str, _ProfilingOption]:
        """The profiling options that run, by name: the per-option configs given (only those), else every
        option over the global range, else every option at its default steps."""
        given = {name: getattr(self, f"{name}_profiling_config") for name in OPTIONS}
        given = {name: config for name, config in given.items() if config is not None}
        if given:
            return given
        if self.has_step_range or self.has_time_range:
            ranged = self.model_dump(include={"start_step", "num_steps", "start_unix_time", "duration"})
            return {name: cls(**ranged) for name, cls in OPTIONS.items()}
        return {name: cls(profile_default_steps=True) for name, cls in OPTIONS.items()}

    def to_api(self) -> dict[str, str]:
        """ProfilingParameters: SageMaker's string map, each option a JSON string under its own key."""
        params = {"LocalPath": self.local_path, "RotateMaxFileSizeInBytes": str(self.file_max_size),
                  "RotateFileCloseIntervalInSeconds": str(self.file_close_interval),
                  "FileOpenFailThreshold": str(self.file_open_fail_threshold)}
        # shipyard's own key: the step timeline's range (SageMaker has it only inside the options).
        if self.has_step_range:
            params["StepRange"] = json.dumps({"StartStep": self.start_step or 0, "NumSteps": self.num_steps})
        elif self.has_time_range:
            params["TimeRange"] = json.dumps({"StartTimeInSecSinceEpoch": self.start_unix_time,
                                              "Duration": self.duration})
        for option in self.options().values():
            params[option.API_NAME] = json.dumps(option.to_api())
        return params


class ProfilerConfig(UserModel):
    """`profiler_config=` of an estimator. System monitoring runs at system_monitor_interval_millis;
    framework metrics (step times) only with framework_profile_params."""

    # SageMaker's fourth, profile_params (its Profiler v2, not built here), must be given by name.
    POSITIONAL: ClassVar[tuple[str, ...]] = ("s3_output_path", "system_monitor_interval_millis",
                                             "framework_profile_params")
    s3_output_path: str | None = None  # default: <output_path>/<job>/profiler-output/
    system_monitor_interval_millis: int = DEFAULT_INTERVAL_MILLIS
    framework_profile_params: FrameworkProfile | None = None
    disable_profiler: bool = False

    @field_validator("system_monitor_interval_millis", mode="before")
    @classmethod
    def _interval(cls, value):
        if value is None:
            return DEFAULT_INTERVAL_MILLIS
        if isinstance(value, bool) or not isinstance(value, int) or value not in ALLOWED_INTERVALS_MILLIS:
            allowed = ", ".join(map(str, ALLOWED_INTERVALS_MILLIS))
            raise ValueError(f"system_monitor_interval_millis must be one of {allowed} (got {value!r})")
        return value

    @property
    def enabled(self) -> bool:
        return not self.disable_profiler

    def output_uri(self, output_path: str, job_name: str) -> str:
        from shipyard.storage.uri import join

        return self.s3_output_path or join(output_path, job_name, "profiler-output")

    def to_api(self, output_path: str, job_name: str) -> dict:
        api = {"S3OutputPath": self.output_uri(output_path, job_name),
               "ProfilingIntervalInMilliseconds": self.system_monitor_interval_millis,
               "DisableProfiler": self.disable_profiler}
        if self.framework_profile_params is not None:
            api["ProfilingParameters"] = self.framework_profile_params.to_api()
        return api


def agent_settings(config: ProfilerConfig | None, output_path: str, job_name: str) -> dict | None:
    """What the agent needs (runtime.config.AgentConfig.profiler); None: profiling off, nothing starts."""
    if config is None or config.disable_profiler:
        return None
    framework = config.framework_profile_params
    return {"uri": config.output_uri(output_path, job_name),
            "interval_millis": config.system_monitor_interval_millis,
            "framework": framework.model_dump() if framework is not None else None,
            "api": config.to_api(output_path, job_name)}

