"""ProfilerReport: runs every other built-in profiler rule over the same data, with parameters given as
`<Rule>_<parameter>` (e.g. CPUBottleneck_cpu_threshold=90); fires when any of them does."""

from __future__ import annotations

from shipyard.rules.profiler.base import SCAN_INTERVAL, Finding
from shipyard.spec.rule_parameters import Parameter
from shipyard.spec.rules import RULES

DESCRIPTION = "Runs all profiler rules and gathers their findings into the profiling report."
RECOMMENDATION = "See each rule's recommendation in the report."
SUB_RULES = {name: RULES["profiler"].load(name) for name in RULES["profiler"] if name != "ProfilerReport"}
PARAMETERS = {
    "opt_out_telemetry": Parameter("bool", False, "accepted for compatibility; shipyard sends no telemetry"),
    **SCAN_INTERVAL,
    **{f"{rule}_{name}": parameter for rule, module in SUB_RULES.items()
       for name, parameter in module.PARAMETERS.items() if name != "scan_interval_us"},
}
COLLECTIONS = ()


def sub_parameters(rule: str, params: dict) -> dict:
    prefix = f"{rule}_"
    return {**{n: p.default for n, p in SUB_RULES[rule].PARAMETERS.items()},
            **{k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}}


def evaluate_all(data, params: dict, now: float, final: bool) -> dict[str, Finding]:
    return {rule: module.evaluate(data, sub_parameters(rule, params), now, final) for rule, module in SUB_RULES.items()}


def evaluate(data, params: dict, now: float, final: bool) -> Finding:
    findings = evaluate_all(data, params, now, final)
    fired = [rule for rule, f in findings.items() if f.triggered]
    details = ("; ".join(f"{rule}: {findings[rule].details}" for rule in fired) if fired
               else f"none of {', '.join(findings)} found an issue")
    step = next((findings[r].step for r in fired if findings[r].step is not None), None)
    return Finding(bool(fired), sum(f.datapoints for f in findings.values()), len(fired), details, step,
                   stats={"findings": findings})
