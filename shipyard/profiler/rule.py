"""`ProfilerRule.sagemaker(rule_configs.CPUBottleneck(), rule_parameters={...})`, as in the SageMaker SDK:
a built-in profiler rule for an estimator's `rules=`, as a RuleConfig(kind="profiler"). `rule_configs` is
the one module of built-in rules shared with the debugger (shipyard.debugger.rule_configs)."""

from __future__ import annotations

from shipyard.errors import ValidationError


class ProfilerRule:
    @staticmethod
    def sagemaker(base_config, name: str | None = None, rule_parameters: dict | None = None, actions=None,
                  **_ignored):
        """container_local_output_path and s3_output_path mean nothing here: findings go to the store."""
        from shipyard.debugger.sdk import BuiltinRule, _actions
        from shipyard.spec.rules import RuleConfig

        if not isinstance(base_config, BuiltinRule) or base_config.kind != "profiler":
            raise ValidationError("base_config", base_config, "give a profiler rule: rule_configs.<Rule>(), e.g. "
                                  "rule_configs.ProfilerReport()")
        return RuleConfig(kind="profiler", name=name or base_config.rule, rule=base_config.rule,
                          parameters={k: str(v) for k, v in (rule_parameters or {}).items()},
                          actions=_actions(actions))
