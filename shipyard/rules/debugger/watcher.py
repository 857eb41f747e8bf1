"""Debugger rules beside a job (registered in control/watchers.py as "debugger_rules"): each poll reads
the steps that appeared in <output>/<job>/debug-output/ and evaluates every rule on them in order, as
smdebug's rule invoker does; a condition met sets IssuesFound with SageMaker's message and runs the
rule's actions (and the rule's own `actions`), and evaluation goes on. A rule about time rather than
tensors (StalledTrainingRule) also has `invoke_without_step()`, asked at each poll. When the instances
end, the rest is evaluated and rules that never fired become NoIssuesFound. A rule that raises is Error
and is evaluated no further."""

from __future__ import annotations

import importlib.util
import traceback

from shipyard.rules import rule_module
from shipyard.rules.actions import run_actions
from shipyard.rules.parameters import parse_parameters

KIND = "debugger"


def _custom_class(config):
    spec = importlib.util.spec_from_file_location(f"shipyard_custom_rule_{config.name}", config.custom_source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, config.custom_class)


class RuleRunner:
    def __init__(self, config, trial) -> None:
        self.config = config
        if config.rule == "custom":
            self.rule = _custom_class(config)(trial, **config.parameters)
        else:
            module = rule_module(KIND, config.rule)
            self.rule = module.RULE(trial, **parse_parameters(config.rule, module.PARAMETERS, config.parameters))
        self.label = config.rule if config.rule != "custom" else config.custom_class
        self.done_step = -1
        self.fired = False
        self.failed = False


class DebuggerRulesWatcher:
    name = "debugger rules"

    def __init__(self, spec, store) -> None:
        from shipyard.debugger.trial import Trial, debug_output_uri

        self.job, self.store = spec.job_name, store
        hook = spec.debugger_hook_config
        self.trial = Trial(debug_output_uri(spec.output_path, spec.job_name, hook.s3_output_path if hook else None))
        self.runners = []
        for config in spec.rules:
            if config.kind != KIND:
                continue
            store.set_rule_status(self.job, KIND, config.name, "InProgress", "")
            try:
                self.runners.append(RuleRunner(config, self.trial))
            except Exception as exc:
                store.set_rule_status(self.job, KIND, config.name, "Error", f"rule could not start: {exc}"[:1024])

    def _evaluate(self, final: bool):
        self.trial.refresh()
        steps = self.trial.loaded_steps()
        if not final and steps:
            steps = steps[:-1] if len(self.trial.workers()) > 1 else steps  # the newest may lack some workers
        stop = None
        for runner in self.runners:
            for step in (s for s in steps if s > runner.done_step):
                if runner.failed:
                    break
                met = self._invoke(runner, runner.rule.invoke_at_step, step)
                if not runner.failed:
                    runner.done_step = step
                    stop = stop or (self._fire(runner, step) if met else None)
            # A rule about time rather than tensors (StalledTrainingRule) is asked between steps too.
            between = getattr(runner.rule, "invoke_without_step", None)
            if between and not final and not runner.failed and self._invoke(runner, between):
                stop = stop or self._fire(runner, runner.done_step)
        return stop

    def _invoke(self, runner, call, *args) -> bool:
        try:
            return bool(call(*args))
        except Exception:
            runner.failed = True
            self.store.set_rule_status(self.job, KIND, runner.config.name, "Error",
                                       traceback.format_exc(limit=3)[-1024:])
            return False

    def _fire(self, runner, step: int):
        """The first time a rule's condition is met: IssuesFound, and its actions (the configuration's,
        then the rule's own)."""
        if runner.fired:
            return None
        runner.fired = True
        where = f" at step {step}" if step >= 0 else ""  # a stall before any step was saved
        message = f"Evaluation of the rule {runner.label}{where} resulted in the condition being met"
        finding = getattr(runner.rule, "finding", "")
        self.store.set_rule_status(self.job, KIND, runner.config.name, "IssuesFound",
                                   f"{message}: {finding}"[:1024] if finding else message)
        return run_actions(tuple(runner.config.actions) + tuple(getattr(runner.rule, "actions", ())),
                           {"job": self.job, "rule": runner.config.name, "step": step,
                            "message": message, "finding": finding},
                           lambda text: self.store.add_event(self.job, "warning", text))

    def poll(self):
        return self._evaluate(final=False)

    def finish(self) -> None:
        self._evaluate(final=True)
        for runner in self.runners:
            if not runner.fired and not runner.failed:
                self.store.set_rule_status(self.job, KIND, runner.config.name, "NoIssuesFound", "")


def create(spec, job_dir, store):
    if not any(r.kind == KIND for r in spec.rules):
        return None
    return DebuggerRulesWatcher(spec, store)
