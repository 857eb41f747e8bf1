"""Debugger rules beside a job (registered in control/watchers.py as "debugger_rules"): each poll reads
the steps that appeared in <output>/<job>/debug-output/ and evaluates every rule on them in order, as
smdebug's rule invoker does; a condition met sets IssuesFound with SageMaker's message and runs the
rule's actions (and the rule's own `actions`), and evaluation goes on. A rule about time rather than
tensors (StalledTrainingRule) also has `invoke_without_step()`, asked at each poll. When the instances
end, the rest is evaluated and rules that never fired become NoIssuesFound. A rule that raises is Error
and is evaluated no further. A rule that leaves files (CreateXgboostReport's HTML report) has
`outputs(job)`, asked when the instances end, and they go to its output folder, where SageMaker's rule
leaves them: <output>/<job>/rule-output/<rule>/.

With include_workers=all, every rank saves its own tensors: each rule then judges each worker on its own
(an instance per worker, over a view of that worker's tensors, keeping its own history), and a finding
names the worker. Otherwise worker_0 is the only one and the rule sees the whole trial."""

from __future__ import annotations

import importlib.util
import tempfile
import traceback
from pathlib import Path

from shipyard.rules.actions import run_actions
from shipyard.spec.rule_parameters import parse_parameters
from shipyard.spec.rules import rule_module

KIND = "debugger"


def _custom_class(config):
    spec = importlib.util.spec_from_file_location(f"shipyard_custom_rule_{config.name}", config.custom_source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, config.custom_class)


class RuleInstance:
    """One rule object and the last step it evaluated."""

    def __init__(self, rule) -> None:
        self.rule, self.done_step = rule, -1


class RuleRunner:
    """A configured rule: its instance over the whole trial, or with `per_worker` one per worker (made as
    workers appear; worker_0's at once, so a rule that cannot start says so at once)."""

    def __init__(self, config, trial, per_worker: bool) -> None:
        self.config = config
        if config.rule == "custom":
            cls, parameters = _custom_class(config), dict(config.parameters)
        else:
            module = rule_module(KIND, config.rule)
            cls, parameters = module.RULE, parse_parameters(config.rule, module.PARAMETERS, config.parameters)
        self.make = lambda view: RuleInstance(cls(view, **parameters))
        self.trial, self.per_worker = trial, per_worker
        first = "worker_0" if per_worker else None
        self.instances = {first: self.make(trial.for_worker(first) if first else trial)}
        self.label = config.rule if config.rule != "custom" else config.custom_class
        self.fired = False
        self.failed = False

    def current(self) -> dict:
        """worker (None: the whole trial) -> its instance, with one for every worker seen so far."""
        if self.per_worker:
            for worker in self.trial.loaded_workers():  # _evaluate has just refreshed
                if worker not in self.instances:
                    self.instances[worker] = self.make(self.trial.for_worker(worker))
        return self.instances


class DebuggerRulesWatcher:
    name = "debugger rules"

    def __init__(self, spec, store) -> None:
        from shipyard.rules.debugger.trials import Trial
        from shipyard.spec.debugger import debug_output_uri
        from shipyard.storage.uri import join

        self.job, self.store = spec.job_name, store
        self.rule_output = join(spec.output_path, spec.job_name, "rule-output")
        hook = spec.debugger_hook_config
        self.trial = Trial(debug_output_uri(spec.output_path, spec.job_name, hook.s3_output_path if hook else None))
        per_worker = bool(hook) and hook.hook_parameters.get("include_workers") == "all"
        self.runners = []
        for config in spec.rules:
            if config.kind != KIND:
                continue
            store.set_rule_status(self.job, KIND, config.name, "InProgress", "")
            try:
                self.runners.append(RuleRunner(config, self.trial, per_worker))
            except Exception as exc:
                store.set_rule_status(self.job, KIND, config.name, "Error", f"rule could not start: {exc}"[:1024])

    def _evaluate(self, final: bool):
        self.trial.refresh()
        stop = None
        for runner in self.runners:
            try:
                instances = runner.current()
            except Exception:  # a rule that cannot start for a worker that appeared later
                self._error(runner)
                continue
            for worker, instance in instances.items():
                # An index file names a complete step of its worker, so every step read can be judged.
                steps = instance.rule.base_trial.loaded_steps()
                for step in (s for s in steps if s > instance.done_step):
                    if runner.failed:
                        break
                    met = self._invoke(runner, instance.rule.invoke_at_step, step)
                    if not runner.failed:
                        instance.done_step = step
                        stop = stop or (self._fire(runner, instance, step, worker) if met else None)
                # A rule about time rather than tensors (StalledTrainingRule) is asked between steps too.
                between = getattr(instance.rule, "invoke_without_step", None)
                if between and not final and not runner.failed and self._invoke(runner, between):
                    stop = stop or self._fire(runner, instance, instance.done_step, worker)
        return stop

    def _invoke(self, runner, call, *args) -> bool:
        try:
            return bool(call(*args))
        except Exception:
            self._error(runner)
            return False

    def _error(self, runner) -> None:
        runner.failed = True
        self.store.set_rule_status(self.job, KIND, runner.config.name, "Error",
                                   traceback.format_exc(limit=3)[-1024:])

    def _fire(self, runner, instance, step: int, worker: str | None):
        """The first time a rule's condition is met (on any worker): IssuesFound, and its actions (the
        configuration's, then the rule's own)."""
        if runner.fired:
            return None
        runner.fired = True
        where = f" at step {step}" if step >= 0 else ""  # a stall before any step was saved
        message = f"Evaluation of the rule {runner.label}{where} resulted in the condition being met"
        finding = getattr(instance.rule, "finding", "")
        if worker is not None:
            finding = f"{worker}: {finding}" if finding else worker
        self.store.set_rule_status(self.job, KIND, runner.config.name, "IssuesFound",
                                   f"{message}: {finding}"[:1024] if finding else message)
        return run_actions(tuple(runner.config.actions) + tuple(getattr(instance.rule, "actions", ())),
                           {"job": self.job, "rule": runner.config.name, "step": step,
                            "message": message, "finding": finding},
                           lambda text: self.store.add_event(self.job, "warning", text))

    def poll(self):
        return self._evaluate(final=False)

    def finish(self):
        late = self._evaluate(final=True)
        for runner in self.runners:
            if not runner.failed:
                self._publish(runner)
            if not runner.fired and not runner.failed:
                self.store.set_rule_status(self.job, KIND, runner.config.name, "NoIssuesFound", "")
        return late

    def _publish(self, runner) -> None:
        """The files of a rule that leaves some, in its output folder (with an instance per worker: the first
        worker's, as a report is of the training rather than of each worker)."""
        from shipyard.storage.transfer import upload_file
        from shipyard.storage.uri import join

        outputs = getattr(next(iter(runner.instances.values())).rule, "outputs", None)
        if outputs is None:
            return
        try:
            with tempfile.TemporaryDirectory(prefix="shipyard-rule-output-") as folder:
                for name, text in outputs(self.job).items():
                    local = Path(folder) / name
                    local.write_text(text)
                    upload_file(local, join(self.rule_output, runner.config.name, name))
        except Exception:
            self._error(runner)

    def follow(self, spec) -> None:
        """Debugger rules are fixed when the job starts (UpdateTrainingJob changes profiling only)."""


def create(spec, job_dir, store):
    if not any(r.kind == KIND for r in spec.rules):
        return None
    return DebuggerRulesWatcher(spec, store)
