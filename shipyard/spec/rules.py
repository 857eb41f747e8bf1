"""A rule evaluated beside a job (SageMaker's DebugRuleConfiguration / ProfilerRuleConfiguration): which
built-in rule (or a custom class in a Python file), its RuleParameters as strings, and the actions taken
when its condition is met. Built-in rule names and parameters are checked against the rule modules'
declarations (RULES below names the modules in shipyard/rules/<kind>/), so a misspelling or a wrongly
typed value fails at construction."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Annotated, Literal, Union

from pydantic import Field, field_validator, model_validator

from shipyard.errors import ValidationError
from shipyard.registry import Registry
from shipyard.spec.build import UserModel

RULE_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$")  # RuleConfigurationName
MAX_RULES_PER_KIND = 20


# The built-in rules of each kind, by SageMaker's name: a module of shipyard/rules/<kind>/ each. They are
# named here, where a RuleConfig is validated, and a module is loaded only when a job names its rule.
RULES = {
    "debugger": Registry("debugger_rules", "debugger rule", {
        "VanishingGradient": "shipyard.rules.debugger.vanishing_gradient",
        "ExplodingTensor": "shipyard.rules.debugger.exploding_tensor",
        "LossNotDecreasing": "shipyard.rules.debugger.loss_not_decreasing",
        "DeadRelu": "shipyard.rules.debugger.dead_relu",
        "PoorWeightInitialization": "shipyard.rules.debugger.poor_weight_initialization",
        "SaturatedActivation": "shipyard.rules.debugger.saturated_activation",
        "WeightUpdateRatio": "shipyard.rules.debugger.weight_update_ratio",
        "AllZero": "shipyard.rules.debugger.all_zero",
        "ClassImbalance": "shipyard.rules.debugger.class_imbalance",
        "Confusion": "shipyard.rules.debugger.confusion",
        "Overfit": "shipyard.rules.debugger.overfit",
        "Overtraining": "shipyard.rules.debugger.overtraining",
        "SimilarAcrossRuns": "shipyard.rules.debugger.similar_across_runs",
        "TensorVariance": "shipyard.rules.debugger.tensor_variance",
        "UnchangedTensor": "shipyard.rules.debugger.unchanged_tensor",
        "StalledTrainingRule": "shipyard.rules.debugger.stalled_training_rule",
        "CheckInputImages": "shipyard.rules.debugger.check_input_images",
        "NLPSequenceRatio": "shipyard.rules.debugger.nlp_sequence_ratio",
        "FeatureImportanceOverweight": "shipyard.rules.debugger.feature_importance_overweight",
        "TreeDepth": "shipyard.rules.debugger.tree_depth",
        "CreateXgboostReport": "shipyard.rules.debugger.create_xgboost_report",
    }),
    "profiler": Registry("profiler_rules", "profiler rule", {
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
    }),
}


def rule_module(kind: str, name: str) -> ModuleType:
    return RULES[kind].load(name)


class StopTraining(UserModel):
    """Stop the job (it ends Stopped, the rule named in its reason)."""

    type: Literal["stop_training"] = "stop_training"


class NotifyWebhook(UserModel):
    """POST the finding as JSON to this URL (in place of SageMaker's SNS email/SMS)."""

    type: Literal["notify_webhook"] = "notify_webhook"
    url: str = Field(pattern=r"^https?://")


class NotifyCommand(UserModel):
    """Run this command (an argv list, never a shell) with the finding as JSON on stdin."""

    type: Literal["notify_command"] = "notify_command"
    argv: tuple[str, ...] = Field(min_length=1)


class NotifyEmail(UserModel):
    """SageMaker's Email action: the finding mailed to this address through the SMTP server the user
    configures (SHIPYARD_SMTP_URL), in place of SNS."""

    type: Literal["email"] = "email"
    email_address: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")


class NotifySMS(UserModel):
    """SageMaker's SMS action: the finding POSTed, with this number, to the SMS gateway the user configures
    (SHIPYARD_SMS_WEBHOOK_URL), in place of SNS."""

    type: Literal["sms"] = "sms"
    phone_number: str = Field(pattern=r"^\+?[0-9]{7,15}$")


Action = Annotated[Union[StopTraining, NotifyWebhook, NotifyCommand, NotifyEmail, NotifySMS],
                   Field(discriminator="type")]


class CollectionToSave(UserModel):
    """A debugger collection a rule needs (SageMaker's CollectionConfiguration)."""

    name: str
    parameters: dict[str, str] = Field(default_factory=dict)


class RuleConfig(UserModel):
    kind: Literal["debugger", "profiler"]
    name: str  # RuleConfigurationName, unique per job
    rule: str  # a built-in rule of that kind, or "custom"
    parameters: dict[str, str] = Field(default_factory=dict)
    actions: tuple[Action, ...] = ()
    # custom rules: the file defining the class and the class to instantiate (SageMaker's rule_to_invoke)
    custom_source: str | None = None
    custom_class: str | None = None
    # debugger rules: the collections the hook must save for this rule (from the rule module by default)
    collections_to_save: tuple[CollectionToSave, ...] = ()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not RULE_NAME_RE.match(value) or len(value) > 256:
            raise ValueError(f"rule name {value!r}: use 1-256 letters, digits and hyphens")
        return value

    @field_validator("parameters")
    @classmethod
    def _parameter_count(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 100:
            raise ValueError(f"{len(value)} rule parameters; at most 100 are allowed")
        return value

    @model_validator(mode="after")
    def _known_rule(self) -> RuleConfig:
        if self.rule == "custom":
            if not self.custom_source or not self.custom_class:
                raise ValidationError(f"rule {self.name}", ..., "a custom rule needs custom_source (a .py file) "
                                      "and custom_class (the rule class in it)")
            if not Path(self.custom_source).is_file():
                raise ValidationError(f"rule {self.name}: source", self.custom_source,
                                      "no such file; give the path of the Python file defining the rule class")
            return self
        from shipyard.spec.rule_parameters import parse_parameters

        module = rule_module(self.kind, self.rule)  # an unknown name: the error names the closest
        values = parse_parameters(self.rule, module.PARAMETERS, self.parameters)
        check = getattr(module, "check", None)  # parameters that only make sense together
        if check is not None:
            try:
                check(values)
            except ValueError as exc:
                raise ValidationError(f"rule_parameters of rule {self.rule}", self.parameters, str(exc)) from None
        return self


def check_rules(rules: tuple[RuleConfig, ...]) -> None:
    """Job-level checks: unique names, at most 20 rules of each kind."""
    names = [r.name for r in rules]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"rule names must be unique; repeated: {', '.join(repeated)}")
    for kind in ("debugger", "profiler"):
        count = sum(r.kind == kind for r in rules)
        if count > MAX_RULES_PER_KIND:
            raise ValueError(f"{count} {kind} rules; at most {MAX_RULES_PER_KIND} are allowed")
