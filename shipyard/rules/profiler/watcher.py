"""Profiler rules beside a job (registered in control/watchers.py as "profiler_rules"): every few
seconds, read what the instances have uploaded to profiler-output and evaluate each profiler rule over
everything so far; a rule that fires is IssuesFound (and stops the job when it has a StopTraining
action), the others become NoIssuesFound when the job ends. Statuses go to the store as kind "profiler".
A ProfilerReport rule also leaves the HTML report where SageMaker does, once the instances ended."""

from __future__ import annotations

import time
import traceback
from pathlib import Path

from shipyard.control.watchers import StopRequest
from shipyard.rules.actions import run_actions
from shipyard.rules.profiler.base import condition_message
from shipyard.rules.profiler.data import ProfilerReader
from shipyard.spec.rule_parameters import parse_parameters
from shipyard.spec.rules import rule_module

# Listing the output URI is not free (S3): at most this often.
READ_SECONDS = 5.0


class ProfilerRulesWatcher:
    name = "profiler rules"

    def __init__(self, spec, store) -> None:
        self.job, self.store = spec.job_name, store
        self.rules, self.params = [], {}
        self.reader = ProfilerReader(spec.profiler_config.output_uri(spec.output_path, spec.job_name))
        self.fired: set[str] = set()
        self.failed: set[str] = set()
        self.last_read = 0.0
        self.follow(spec)

    def follow(self, spec) -> None:
        """The job's profiler rules: at start, and when its profiling is updated while it runs. Rules
        added are evaluated from then on over all the data; profiling turned off stops the rules not yet
        decided (Stopped), as SageMaker's disable_profiling turns them off."""
        if spec.profiler_config is None or spec.profiler_config.disable_profiler:
            for rule in self.rules:
                if rule.name not in self.fired and rule.name not in self.failed:
                    self.store.set_rule_status(self.job, "profiler", rule.name, "Stopped", "profiling was disabled")
            self.rules = []
            return
        known = {r.name for r in self.rules}
        for rule in spec.rules:
            if rule.kind == "profiler" and rule.name not in known:
                self.params[rule.name] = parse_parameters(rule.rule, rule_module("profiler", rule.rule).PARAMETERS,
                                                          rule.parameters)
                self.rules.append(rule)
                self.fired.discard(rule.name)   # a name turned off before and given again starts afresh
                self.failed.discard(rule.name)
                self.store.set_rule_status(self.job, "profiler", rule.name, "InProgress")

    def _evaluate(self, final: bool) -> StopRequest | None:
        data, now, request = self.reader.read(operators=final), time.time(), None  # operators: end only
        for rule in self.rules:
            if rule.name in self.fired or rule.name in self.failed:
                continue  # IssuesFound stays, as on SageMaker
            try:
                finding = rule_module("profiler", rule.rule).evaluate(data, self.params[rule.name], now, final)
            except Exception:
                self.failed.add(rule.name)
                self.store.set_rule_status(self.job, "profiler", rule.name, "Error", traceback.format_exc(limit=3))
                continue
            if finding.triggered:
                self.fired.add(rule.name)
                message = condition_message(rule.rule, finding)
                self.store.set_rule_status(self.job, "profiler", rule.name, "IssuesFound", message)
                stop = run_actions(rule.actions, {"job": self.job, "rule": rule.name, "step": finding.step,
                                                  "message": message},
                                   lambda text: self.store.add_event(self.job, "warning", text))
                request = request or stop
            elif final:
                self.store.set_rule_status(self.job, "profiler", rule.name, "NoIssuesFound", finding.details)
        return request

    def poll(self) -> StopRequest | None:
        if not self.rules or time.monotonic() - self.last_read < READ_SECONDS:
            return None
        self.last_read = time.monotonic()
        return self._evaluate(final=False)

    def finish(self) -> StopRequest | None:
        if not self.rules:
            return None
        late = self._evaluate(final=True)
        for rule in self.rules:
            if rule.rule == "ProfilerReport":
                self._publish_report(rule.name)
        return late

    def _publish_report(self, rule_name: str) -> None:
        """Where SageMaker's ProfilerReport leaves it: <output>/<job>/rule-output/<rule>/profiler-output/."""
        from shipyard.rules.profiler.report import write_report
        from shipyard.storage.transfer import upload_file
        from shipyard.storage.uri import join

        spec = self.store.get_job(self.job).spec
        upload_file(write_report(self.store, self.job), join(spec.output_path, self.job, "rule-output", rule_name,
                                                             "profiler-output", "profiler-report.html"))


def create(spec, job_dir: Path, store) -> ProfilerRulesWatcher | None:
    """None (nothing runs) for a job with no profiler rules or with profiling off."""
    if not any(r.kind == "profiler" for r in spec.rules) or spec.profiler_config is None \
            or spec.profiler_config.disable_profiler:
        return None
    return ProfilerRulesWatcher(spec, store)
