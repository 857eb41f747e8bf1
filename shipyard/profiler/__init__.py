"""The profiler as a user sees it: `ProfilerConfig` / `FrameworkProfile` for an estimator's
`profiler_config=`, `ProfilerRule.sagemaker(rule_configs.X(), ...)` for its `rules=`. See docs/profiler.md."""

from shipyard.debugger import rule_configs
from shipyard.profiler.rule import ProfilerRule
from shipyard.spec.profiler import (
    DataloaderProfilingConfig,
    DetailedProfilingConfig,
    FrameworkProfile,
    ProfilerConfig,
    PythonProfiler,
    PythonProfilingConfig,
    cProfileTimer,
)

__all__ = ["DataloaderProfilingConfig", "DetailedProfilingConfig", "FrameworkProfile", "ProfilerConfig",
           "ProfilerRule", "PythonProfiler", "PythonProfilingConfig", "cProfileTimer", "rule_configs"]
