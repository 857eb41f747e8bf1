"""The profiler as a user sees it: `ProfilerConfig` / `FrameworkProfile` for an estimator's
`profiler_config=`, `ProfilerRule.sagemaker(rule_configs.X(), ...)` for its `rules=`. See docs/profiler.md.
The names load when first used: what runs in a training process (steps.py, phases.py, ...) imports
this package without them."""

from shipyard.lazy import exports

__all__ = ["DataloaderProfilingConfig", "DetailedProfilingConfig", "FrameworkProfile", "ProfilerConfig",
           "ProfilerRule", "PythonProfiler", "PythonProfilingConfig", "cProfileTimer", "rule_configs"]
__getattr__ = exports(__name__, {
    **{name: f"shipyard.spec.profiler:{name}" for name in __all__ if name not in ("ProfilerRule", "rule_configs")},
    "ProfilerRule": "shipyard.profiler.rule:ProfilerRule", "rule_configs": "shipyard.debugger.rule_configs",
})
