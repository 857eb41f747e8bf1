"""UpdateTrainingJob's profiling (control/profiling.py) against a real store: what each SageMaker call
leaves in the job's spec (what is kept, replaced, added), the spec's version its controller watches,
and every refusal naming the field and the fix, with nothing stored."""

from __future__ import annotations

import pytest

from shipyard.control import profiling
from shipyard.errors import ValidationError
from shipyard.profiler import FrameworkProfile, ProfilerConfig, ProfilerRule, rule_configs
from shipyard.spec.job import JobSpec
from shipyard.store import Store


@pytest.fixture
def store(home):
    return Store(home)


def _job(store, **fields) -> JobSpec:
    return store.create_job(JobSpec(job_name="job", output_path="file:///out", **fields)).spec


def test_enable_default_then_update_then_disable(store):
    _job(store)
    spec = profiling.enable_default(store, "job")
    assert spec.profiler_config == ProfilerConfig() and [r.rule for r in spec.rules] == ["ProfilerReport"]
    assert store.spec_version("job") == 1 and store.get_job("job").spec == spec

    spec = profiling.update(store, "job", system_monitor_interval_millis=100,
                            framework_profile_params=FrameworkProfile(start_step=3, num_steps=2),
                            rules=[ProfilerRule.sagemaker(rule_configs.CPUBottleneck())])
    assert spec.profiler_config.system_monitor_interval_millis == 100
    assert spec.profiler_config.framework_profile_params.start_step == 3
    assert [r.name for r in spec.rules] == ["ProfilerReport", "CPUBottleneck"]

    spec = profiling.update(store, "job", rules=[ProfilerRule.sagemaker(rule_configs.IOBottleneck())])
    assert spec.profiler_config.system_monitor_interval_millis == 100       # what is not given stays
    assert spec.profiler_config.framework_profile_params.start_step == 3

    spec = profiling.update(store, "job", disable_framework_metrics=True)
    assert spec.profiler_config.framework_profile_params is None
    assert spec.profiler_config.system_monitor_interval_millis == 100

    spec = profiling.disable(store, "job")
    assert spec.profiler_config.disable_profiler and not any(r.kind == "profiler" for r in spec.rules)
    assert store.spec_version("job") == 5
    spec = profiling.update(store, "job", system_monitor_interval_millis=1000)   # update_profiler turns it on again
    assert spec.profiler_config.enabled and spec.profiler_config.system_monitor_interval_millis == 1000


def test_a_job_s_own_profiler_path_and_debugger_rules_stay(store):
    _job(store, profiler_config=ProfilerConfig(s3_output_path="file:///elsewhere/prof", disable_profiler=True),
         rules=[profiling.RuleConfig(kind="debugger", name="Loss", rule="LossNotDecreasing")])
    spec = profiling.enable_default(store, "job")
    assert spec.profiler_config.s3_output_path == "file:///elsewhere/prof"
    assert [r.name for r in profiling.disable(store, "job").rules] == ["Loss"]


@pytest.mark.parametrize("call, message", [
    (lambda s: profiling.enable_default(s, "job"), "job='job': Debugger monitoring is already enabled"),
    (lambda s: profiling.update(s, "job"), "update_profiler: give rules, system_monitor_interval_millis"),
    (lambda s: profiling.update(s, "job", disable_framework_metrics=True, framework_profile_params=FrameworkProfile()),
     "framework_profile_params=.*cannot be given with disable_framework_metrics=True"),
    (lambda s: profiling.update(s, "job", framework_profile_params={"start_step": 1}),
     "framework_profile_params=.*give a FrameworkProfile"),
    (lambda s: profiling.update(s, "job", system_monitor_interval_millis=300),
     "^system_monitor_interval_millis=300: .*must be one of 100, 200, 500"),
    (lambda s: profiling.update(s, "job", rules=[profiling.RuleConfig(kind="debugger", name="x", rule="LossNotDecreasing")]),
     "rules=.*give profiler rules: ProfilerRule.sagemaker"),
    (lambda s: profiling.update(s, "job", rules=[ProfilerRule.sagemaker(rule_configs.ProfilerReport())]),
     "rules='ProfilerReport': the job has a rule of that name already"),
    (lambda s: profiling.update(s, "job", s3_output_path="file:///out/job/other"),
     "s3_output_path='file:///out/job/other': the job's profiler output stays at file:///out/job/profiler-output"),
])
def test_refusals_name_the_field_and_store_nothing(store, call, message):
    _job(store, profiler_config=ProfilerConfig(), rules=[ProfilerRule.sagemaker(rule_configs.ProfilerReport())])
    with pytest.raises(ValidationError, match=message):
        call(store)
    assert store.spec_version("job") == 0


def test_a_local_profiler_path_must_be_under_the_job_s_output(store):
    _job(store)
    with pytest.raises(ValidationError, match="must be under the job's own output, file:///out/job"):
        profiling.update(store, "job", s3_output_path="file:///tmp/prof")
    spec = profiling.update(store, "job", s3_output_path="file:///out/job/prof")
    assert spec.profiler_config.output_uri(spec.output_path, "job") == "file:///out/job/prof"


def test_only_a_job_in_progress_can_change_its_profiling(store):
    _job(store)
    with pytest.raises(ValidationError, match="job='job': profiling is already disabled"):
        profiling.disable(store, "job")
    store.transition("job", "Completed", "Completed")
    with pytest.raises(ValidationError, match="job='job': is Completed: profiling can only be changed while"):
        profiling.enable_default(store, "job")
    assert store.spec_version("job") == 0
