"""ProfilerConfig and FrameworkProfile: SageMaker's profiler configuration (sagemaker.debugger), with its
names, allowed values and defaults, validated when made. `to_api()` gives the CreateTrainingJob shape
(ProfilerConfig in describe) and what the agent writes to /opt/ml/input/config/profilerconfig.json."""

from __future__ import annotations

import json

from pydantic import Field, field_validator, model_validator

from shipyard.spec.build import UserModel, build

ALLOWED_INTERVALS_MILLIS = (100, 200, 500, 1000, 5000, 60000)
DEFAULT_INTERVAL_MILLIS = 500
DEFAULT_LOCAL_PATH = "/opt/ml/output/profiler"


class FrameworkProfile(UserModel):
    """Framework metrics: which steps (start_step/num_steps, or start_unix_time/duration; the two pairs
    exclude each other) and how the trace files rotate."""

    local_path: str = DEFAULT_LOCAL_PATH
    file_max_size: int = Field(default=10485760, ge=1)
    file_close_interval: float = Field(default=60, gt=0)
    file_open_fail_threshold: int = Field(default=50, ge=1)
    start_step: int | None = Field(default=None, ge=0)
    num_steps: int | None = Field(default=None, ge=1)
    start_unix_time: float | None = Field(default=None, ge=0)
    duration: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_range(self) -> FrameworkProfile:
        by_step = self.start_step is not None or self.num_steps is not None
        by_time = self.start_unix_time is not None or self.duration is not None
        if by_step and by_time:
            raise ValueError("give either start_step/num_steps or start_unix_time/duration, not both")
        return self

    def in_range(self, step: int, now: float) -> bool:
        """Whether framework metrics are recorded for this step (all steps when no range is given)."""
        if self.start_step is not None or self.num_steps is not None:
            start = self.start_step or 0
            return step >= start and (self.num_steps is None or step < start + self.num_steps)
        if self.start_unix_time is not None or self.duration is not None:
            start = self.start_unix_time or 0.0
            return now >= start and (self.duration is None or now < start + self.duration)
        return True

    def to_api(self) -> dict[str, str]:
        """ProfilingParameters: SageMaker's string map."""
        params = {"LocalPath": self.local_path, "RotateMaxFileSizeInBytes": str(self.file_max_size),
                  "RotateFileCloseIntervalInSeconds": str(self.file_close_interval),
                  "FileOpenFailThreshold": str(self.file_open_fail_threshold)}
        if self.start_step is not None or self.num_steps is not None:
            params["StepRange"] = json.dumps({"StartStep": self.start_step or 0, "NumSteps": self.num_steps})
        elif self.start_unix_time is not None or self.duration is not None:
            params["TimeRange"] = json.dumps({"StartTimeInSecSinceEpoch": self.start_unix_time,
                                              "Duration": self.duration})
        return params


class ProfilerConfig(UserModel):
    """`profiler_config=` of an estimator. System monitoring runs at system_monitor_interval_millis;
    framework metrics (step times) only with framework_profile_params."""

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


def profiler_config_of(value) -> ProfilerConfig | None:
    """The SDK's `profiler_config=`: a ProfilerConfig or a dict of its fields."""
    if value is None or isinstance(value, ProfilerConfig):
        return value
    if isinstance(value, dict):
        return build(ProfilerConfig, "profiler_config", **value)
    raise ValueError(f"profiler_config must be a shipyard.profiler.ProfilerConfig or a dict, not {type(value).__name__}")
