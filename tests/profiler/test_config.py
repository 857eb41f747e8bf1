"""ProfilerConfig as the SDK takes it: SageMaker's names and allowed values, clear errors, describe."""

from __future__ import annotations

import pytest

from shipyard.errors import ValidationError
from shipyard.profiler import FrameworkProfile, ProfilerConfig, ProfilerRule, rule_configs
from shipyard.spec.job import JobSpec
from shipyard.spec.profiler import agent_settings


def test_interval_must_be_an_allowed_value():
    with pytest.raises(ValidationError) as error:
        ProfilerConfig(system_monitor_interval_millis=300)
    message = str(error.value)
    assert "system_monitor_interval_millis must be one of 100, 200, 500, 1000, 5000, 60000" in message
    assert ProfilerConfig().system_monitor_interval_millis == 500
    assert ProfilerConfig(system_monitor_interval_millis=None).system_monitor_interval_millis == 500


def test_step_and_time_ranges_exclude_each_other():
    with pytest.raises(ValidationError, match="either start_step/num_steps or start_unix_time/duration"):
        FrameworkProfile(start_step=3, duration=10)
    profile = FrameworkProfile(start_step=5, num_steps=2)
    assert [s for s in range(10) if profile.in_range(s, 0)] == [5, 6]
    assert FrameworkProfile().in_range(123, 0)


def test_estimator_refuses_a_bad_dict_naming_the_field(home, tmp_path):
    from shipyard.pytorch import PyTorch

    (tmp_path / "train.py").write_text("")
    with pytest.raises(ValidationError) as error:
        PyTorch(entry_point="train.py", source_dir=str(tmp_path), profiler_config={"system_monitor_interval_millis": 7})
    assert error.value.field == "profiler_config.system_monitor_interval_millis"
    assert "one of 100, 200, 500" in str(error.value)
    with pytest.raises(ValidationError, match="profiler_config"):
        PyTorch(entry_point="train.py", source_dir=str(tmp_path), profiler_config="on")


def test_disable_profiler_turns_the_config_off(home, tmp_path):
    from shipyard.pytorch import PyTorch

    (tmp_path / "train.py").write_text("")
    est = PyTorch(entry_point="train.py", source_dir=str(tmp_path), profiler_config=ProfilerConfig(),
                  disable_profiler=True)
    assert est.profiler_config.disable_profiler
    assert agent_settings(est.profiler_config, "/out", "job") is None


def test_api_shape_and_agent_settings():
    config = ProfilerConfig(system_monitor_interval_millis=100,
                            framework_profile_params=FrameworkProfile(start_step=2, num_steps=3))
    api = config.to_api("s3://bucket/out", "job-1")
    assert api["S3OutputPath"] == "s3://bucket/out/job-1/profiler-output"
    assert api["ProfilingIntervalInMilliseconds"] == 100
    assert api["ProfilingParameters"]["StepRange"] == '{"StartStep": 2, "NumSteps": 3}'
    settings = agent_settings(config, "s3://bucket/out", "job-1")
    assert settings["interval_millis"] == 100 and settings["framework"]["start_step"] == 2
    assert agent_settings(None, "s3://bucket/out", "job-1") is None


def _spec(**extra) -> dict:
    return dict(job_name="j", instance_count=1, output_path="/tmp/out", **extra)


def test_profiler_rules_need_profiling_on():
    rule = ProfilerRule.sagemaker(rule_configs.StepOutlier())
    with pytest.raises(ValidationError, match="profiler rules need profiling on"):
        JobSpec(**_spec(rules=(rule,)))
    assert JobSpec(**_spec(rules=(rule,), profiler_config=ProfilerConfig())).rules == (rule,)


def test_profiler_rule_names_and_parameters_are_checked():
    rule = ProfilerRule.sagemaker(rule_configs.ProfilerReport(), name="report",
                                  rule_parameters={"StepOutlier_n_outliers": 0})
    assert (rule.kind, rule.name, rule.rule, rule.parameters) == ("profiler", "report", "ProfilerReport",
                                                                   {"StepOutlier_n_outliers": "0"})
    with pytest.raises(ValidationError, match="give a profiler rule"):
        ProfilerRule.sagemaker(rule_configs.vanishing_gradient())
    with pytest.raises(ValidationError, match="did you mean 'threshold'"):
        ProfilerRule.sagemaker(rule_configs.CPUBottleneck(), rule_parameters={"treshold": 5})
    with pytest.raises(ValidationError, match="n_outliers='many': must be an integer"):
        ProfilerRule.sagemaker(rule_configs.StepOutlier(), rule_parameters={"n_outliers": "many"})
    with pytest.raises(ValidationError, match="did you mean 'StepOutlier_n_outliers'"):
        ProfilerRule.sagemaker(rule_configs.ProfilerReport(), rule_parameters={"StepOutlier_n_outlier": 0})


def test_job_yaml_takes_profiler_config(tmp_path):
    from shipyard.cli.jobfile import load

    path = tmp_path / "job.yaml"
    path.write_text("entry_point: t.py\nprofiler_config:\n  system_monitor_interval_millis: 1000\n"
                    "  framework_profile_params: {start_step: 5, num_steps: 10}\n")
    config = load(path).arguments["profiler_config"]
    assert config == {"system_monitor_interval_millis": 1000,
                      "framework_profile_params": {"start_step": 5, "num_steps": 10}}
