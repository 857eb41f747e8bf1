"""UpdateTrainingJob's profiling, as SageMaker's estimator methods call it (enable_default_profiling,
disable_profiling, update_profiler): the running job's new ProfilerConfig and profiler rules, checked as
SageMaker checks them and stored (Store.update_spec). The job's controller then passes the profiling on
to its instances (runtime/profiler/agent.py `update`) and its rules to the rule watcher
(control/watchers.py `follow_all`). Nothing is stored when a check fails."""

from __future__ import annotations

from pathlib import Path

from shipyard.errors import ValidationError
from shipyard.spec.build import build
from shipyard.spec.job import JobSpec
from shipyard.spec.profiler import FrameworkProfile, ProfilerConfig
from shipyard.spec.rules import RuleConfig
from shipyard.storage.uri import filesystem, is_local, join

KEEP = object()   # framework_profile_params not given: the job's own stay


def _local(uri: str) -> Path:
    return Path(filesystem(uri)[1])


def _running(store, name: str) -> JobSpec:
    from shipyard.control.reconcile import reconcile

    record = reconcile(store, name)
    if record.status != "InProgress":
        raise ValidationError("job", name, f"is {record.status}: profiling can only be changed while the job "
                              "is in progress")
    return record.spec


def _profiling_on(spec: JobSpec) -> bool:
    return spec.profiler_config is not None and spec.profiler_config.enabled


def _store(store, spec: JobSpec, **changes) -> JobSpec:
    updated = build(JobSpec, "job", **{**spec.model_dump(), **changes})
    if not store.update_spec(spec.job_name, updated):
        raise ValidationError("job", spec.job_name, f"is {store.status(spec.job_name)}: it ended before its "
                              "profiling could be changed")
    return updated


def enable_default(store, name: str) -> JobSpec:
    """System metrics every 500 ms, no framework metrics, and the ProfilerReport rule (SageMaker's
    enable_default_profiling); the job's profiler S3 path stays when it had one."""
    spec = _running(store, name)
    if _profiling_on(spec):
        raise ValidationError("job", name, "Debugger monitoring is already enabled; change it with update_profiler()")
    earlier = spec.profiler_config
    config = ProfilerConfig(s3_output_path=earlier.s3_output_path if earlier else None)
    rules = spec.rules
    if not any(r.kind == "profiler" and r.rule == "ProfilerReport" for r in rules):
        rules = (*rules, RuleConfig(kind="profiler", name="ProfilerReport", rule="ProfilerReport"))
    return _store(store, spec, profiler_config=config, rules=rules)


def disable(store, name: str) -> JobSpec:
    """No more system or framework metrics; the profiler rules stop (their statuses end Stopped) and leave
    the job's configuration, since profiler rules need profiling on."""
    spec = _running(store, name)
    if not _profiling_on(spec):
        raise ValidationError("job", name, "profiling is already disabled")
    return _store(store, spec, profiler_config=spec.profiler_config.model_copy(update={"disable_profiler": True}),
                  rules=tuple(r for r in spec.rules if r.kind != "profiler"))


def update(store, name: str, rules=None, system_monitor_interval_millis: int | None = None,
           s3_output_path: str | None = None, framework_profile_params=KEEP,
           disable_framework_metrics: bool = False) -> JobSpec:
    """SageMaker's update_profiler: turns profiling on with what is given (the rest as it was), adds
    profiler rules (only new ones: a rule the job has keeps its configuration), or with
    disable_framework_metrics stops the framework metrics only."""
    if not (rules or system_monitor_interval_millis or s3_output_path or framework_profile_params is not KEEP
            or disable_framework_metrics):
        raise ValidationError("update_profiler", ..., "give rules, system_monitor_interval_millis, s3_output_path, "
                              "framework_profile_params or disable_framework_metrics=True")
    if disable_framework_metrics and framework_profile_params is not KEEP:
        raise ValidationError("framework_profile_params", framework_profile_params,
                              "cannot be given with disable_framework_metrics=True")
    if framework_profile_params is not KEEP and not isinstance(framework_profile_params, FrameworkProfile):
        raise ValidationError("framework_profile_params", framework_profile_params,
                              "give a FrameworkProfile (FrameworkProfile() for the default steps)")
    new_rules = list(rules or ())
    for rule in new_rules:
        if not isinstance(rule, RuleConfig) or rule.kind != "profiler":
            raise ValidationError("rules", rule, "give profiler rules: ProfilerRule.sagemaker(rule_configs.<Rule>())")
    spec = _running(store, name)
    earlier = spec.profiler_config
    known = {r.name for r in spec.rules}
    for rule in new_rules:
        if rule.name in known:
            raise ValidationError("rules", rule.name, "the job has a rule of that name already; only new profiler "
                                  "rules can be added while it runs (give it another name)")
    if s3_output_path and earlier is not None and earlier.output_uri(spec.output_path, name) != s3_output_path:
        raise ValidationError("s3_output_path", s3_output_path, "the job's profiler output stays at "
                              f"{earlier.output_uri(spec.output_path, name)} once profiling was on; leave it out")
    prefix = join(spec.output_path, name)
    if s3_output_path and is_local(s3_output_path) and not (
            is_local(prefix) and _local(s3_output_path).is_relative_to(_local(prefix))):
        raise ValidationError("s3_output_path", s3_output_path, "a local profiler output given while the job runs "
                              f"must be under the job's own output, {prefix} (the instances write nowhere else); "
                              "leave it out for <that>/profiler-output")
    framework = earlier.framework_profile_params if earlier is not None else None
    if disable_framework_metrics:
        framework = None
    elif framework_profile_params is not KEEP:
        framework = framework_profile_params
    config = build(ProfilerConfig, "", **{   # errors name update_profiler's own arguments
        "s3_output_path": s3_output_path or (earlier.s3_output_path if earlier else None),
        "system_monitor_interval_millis": system_monitor_interval_millis or (
            earlier.system_monitor_interval_millis if earlier else None),
        "framework_profile_params": framework})
    return _store(store, spec, profiler_config=config, rules=(*spec.rules, *new_rules))
