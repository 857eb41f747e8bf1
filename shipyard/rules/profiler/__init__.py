"""Built-in profiler rules, each a module registered by name (SageMaker's rule names). Each module
declares PARAMETERS (SageMaker's names and defaults), DESCRIPTION and RECOMMENDATION (the report's
rules table), and `evaluate(data, params, now, final) -> Finding` over everything collected so far."""

from shipyard.registry import Registry

RULES = Registry("profiler_rules", "profiler rule", {
    "StepOutlier": "shipyard.rules.profiler.step_outlier",
    "CPUBottleneck": "shipyard.rules.profiler.cpu_bottleneck",
    "LowGPUUtilization": "shipyard.rules.profiler.low_gpu_utilization",
    "OverallSystemUsage": "shipyard.rules.profiler.overall_system_usage",
    "MaxInitializationTime": "shipyard.rules.profiler.max_initialization_time",
    "IOBottleneck": "shipyard.rules.profiler.io_bottleneck",
    "GPUMemoryIncrease": "shipyard.rules.profiler.gpu_memory_increase",
    "LoadBalancing": "shipyard.rules.profiler.load_balancing",
    "BatchSize": "shipyard.rules.profiler.batch_size",
    "Dataloader": "shipyard.rules.profiler.dataloader",
    "OverallFrameworkMetrics": "shipyard.rules.profiler.overall_framework_metrics",
    "ProfilerReport": "shipyard.rules.profiler.profiler_report",
})
