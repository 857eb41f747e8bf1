"""FrameworkProfile's profiling options as the SageMaker SDK takes them: DetailedProfilingConfig,
DataloaderProfilingConfig and PythonProfilingConfig, SageMaker's precedence and defaults, clear errors,
and the ProfilingParameters keys written to profilerconfig.json."""

from __future__ import annotations

import json

import pytest

from shipyard.errors import ValidationError
from shipyard.profiler import (
    DataloaderProfilingConfig,
    DetailedProfilingConfig,
    FrameworkProfile,
    ProfilerConfig,
    PythonProfiler,
    PythonProfilingConfig,
    cProfileTimer,
)
from shipyard.spec.profiler import agent_settings


def _options(params: dict) -> dict:
    return {k: json.loads(v) for k, v in params.items() if k.endswith("ProfilingConfig")}


def test_no_options_means_sagemakers_default_steps():
    params = FrameworkProfile().to_api()
    assert _options(params) == {
        "DetailedProfilingConfig": {"StartStep": 5, "NumSteps": 1},
        "DataloaderProfilingConfig": {"StartStep": 7, "NumSteps": 1, "MetricsRegex": ".*"},
        "PythonProfilingConfig": {"StartStep": 9, "NumSteps": 3, "ProfilerName": "cprofile", "cProfileTimer": "default"},
    }
    assert params["LocalPath"] == "/opt/ml/output/profiler" and params["RotateMaxFileSizeInBytes"] == "10485760"
    assert "StepRange" not in params and FrameworkProfile().in_range(10_000, 0)  # the timeline: every step


def test_a_global_range_applies_to_every_option():
    profile = FrameworkProfile(start_step=6)
    assert set(profile.options()) == {"detailed", "dataloader", "python"}
    for option in profile.options().values():
        assert (option.start_step, option.num_steps) == (6, 1)  # the SDK's StepRange: one step from start_step
    assert _options(FrameworkProfile(start_unix_time=1700000000, duration=30).to_api())["PythonProfilingConfig"] == \
        {"StartTimeInSecSinceEpoch": 1700000000, "Duration": 30, "ProfilerName": "cprofile", "cProfileTimer": "total_time"}


def test_given_options_only_run_and_the_global_range_is_ignored_for_them():
    profile = FrameworkProfile(start_step=1, num_steps=10,
                               detailed_profiling_config=DetailedProfilingConfig(start_step=10),
                               python_profiling_config=PythonProfilingConfig(num_steps=2, python_profiler="pyinstrument"))
    assert _options(profile.to_api()) == {
        "DetailedProfilingConfig": {"StartStep": 10, "NumSteps": 1},
        "PythonProfilingConfig": {"StartStep": 0, "NumSteps": 2, "ProfilerName": "pyinstrument"},  # no timer
    }
    assert json.loads(profile.to_api()["StepRange"]) == {"StartStep": 1, "NumSteps": 10}  # the timeline's
    assert DataloaderProfilingConfig().to_api() == {"StartStep": 7, "NumSteps": 1, "MetricsRegex": ".*"}
    assert PythonProfilingConfig(profile_default_steps=True, start_step=50).to_api() == \
        {"StartStep": 9, "NumSteps": 3, "ProfilerName": "cprofile", "cProfileTimer": "default"}


def test_sdk_enums_and_any_case_are_accepted():
    config = PythonProfilingConfig(python_profiler=PythonProfiler.CPROFILE, cprofile_timer=cProfileTimer.OFF_CPU_TIME)
    assert (config.python_profiler, config.cprofile_timer) == ("cprofile", "off_cpu_time")
    assert PythonProfilingConfig(python_profiler="cProfile").python_profiler == "cprofile"


@pytest.mark.parametrize("values, field, message", [
    ({"python_profiler": "yappi"}, "python_profiler",
     "python_profiler must be one of cprofile, pyinstrument (got 'yappi')"),
    ({"cprofile_timer": "wall"}, "cprofile_timer",
     "cprofile_timer must be one of total_time, cpu_time, off_cpu_time, default (got 'wall')"),
    ({"start_step": -1}, "start_step", "greater than or equal to 0"),
    ({"num_steps": 0}, "num_steps", "greater than or equal to 1"),
])
def test_bad_python_profiling_values_name_the_field_and_the_allowed_values(values, field, message):
    with pytest.raises(ValidationError) as error:
        PythonProfilingConfig(**values)
    assert error.value.field.split(".")[-1] == field
    assert message in str(error.value)


def test_other_bad_configs_are_refused():
    with pytest.raises(ValidationError, match="either start_step/num_steps or start_unix_time/duration"):
        DetailedProfilingConfig(start_step=3, duration=10)
    with pytest.raises(ValidationError, match="metrics_regex must be a valid regular expression"):
        DataloaderProfilingConfig(metrics_regex="(")
    with pytest.raises(ValidationError, match="python_profiler"):
        DetailedProfilingConfig(python_profiler="cprofile")  # extra="forbid": not this option's field
    with pytest.raises(ValidationError, match="python_profiler must be one of cprofile, pyinstrument"):
        FrameworkProfile(python_profiling_config={"python_profiler": "yappi"})


def test_the_options_reach_the_training_processes_and_profilerconfig_json():
    config = ProfilerConfig(framework_profile_params=FrameworkProfile(
        dataloader_profiling_config=DataloaderProfilingConfig(start_step=2, num_steps=4, metrics_regex="Worker"),
        python_profiling_config=PythonProfilingConfig(start_step=3)))
    settings = agent_settings(config, "/out", "job-1")
    api = settings["api"]["ProfilingParameters"]  # what the agent writes to profilerconfig.json
    assert json.loads(api["DataloaderProfilingConfig"]) == {"StartStep": 2, "NumSteps": 4, "MetricsRegex": "Worker"}
    assert json.loads(api["PythonProfilingConfig"])["StartStep"] == 3
    again = FrameworkProfile(**json.loads(json.dumps(settings["framework"])))  # as the process rebuilds it
    assert again == config.framework_profile_params and again.options() == config.framework_profile_params.options()
