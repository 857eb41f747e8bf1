"""Watchers (rules beside a job): the controller's view of them, and rule statuses in describe."""

from __future__ import annotations

from shipyard.control.describe import describe_record
from shipyard.control.watchers import StopRequest, finish_all, poll_all
from shipyard.spec.job import JobSpec
from shipyard.store import Store


class Fake:
    def __init__(self, name, request=None, fail=False):
        self.name, self.request, self.fail, self.polls, self.finished = name, request, fail, 0, False

    def poll(self):
        self.polls += 1
        if self.fail:
            raise RuntimeError("broken rule")
        return self.request

    def finish(self):
        if self.fail:
            raise RuntimeError("broken at the end")
        self.finished = True
        return self.request


def _store(tmp_path) -> Store:
    store = Store(tmp_path)
    store.create_job(JobSpec(job_name="job-1", instance_count=1, output_path="file:///out",
                             hyperparameters={"sagemaker_program": '"t.py"'}))
    return store


def test_a_watcher_that_raises_is_reported_and_dropped_and_the_others_go_on(tmp_path):
    store = _store(tmp_path)
    broken, quiet = Fake("broken", fail=True), Fake("quiet")
    watchers = [broken, quiet]
    assert poll_all(watchers, store, "job-1") is None
    assert watchers == [quiet] and quiet.polls == 1
    assert "broken stopped watching" in store.events("job-1", "warning")[0]["message"]
    finish_all([Fake("late", fail=True), quiet], store, "job-1")
    assert quiet.finished and "late could not finish" in store.events("job-1", "warning")[1]["message"]


def test_the_first_stop_request_wins(tmp_path):
    store = _store(tmp_path)
    stop = StopRequest("Stopped by rule LossNotDecreasing")
    assert poll_all([Fake("a"), Fake("b", stop), Fake("c", StopRequest("other"))], store, "job-1") == stop


def test_a_stop_request_in_the_last_look_is_returned_and_every_watcher_finishes(tmp_path):
    store = _store(tmp_path)
    stop = StopRequest("Stopped by rule LossNotDecreasing")
    watchers = [Fake("a"), Fake("b", stop), Fake("c", StopRequest("other"))]
    assert finish_all(watchers, store, "job-1") == stop
    assert all(w.finished for w in watchers)


def test_rule_statuses_appear_in_describe_by_kind(tmp_path):
    store = _store(tmp_path)
    store.set_rule_status("job-1", "debugger", "VanishingGradient", "InProgress")
    store.set_rule_status("job-1", "debugger", "VanishingGradient", "IssuesFound", "step 12: gradients/0.weight")
    store.set_rule_status("job-1", "profiler", "CPUBottleneck", "NoIssuesFound")
    description = describe_record(store, store.get_job("job-1"))
    debug = description["DebugRuleEvaluationStatuses"]
    assert [(s["RuleConfigurationName"], s["RuleEvaluationStatus"], s["StatusDetails"]) for s in debug] == [
        ("VanishingGradient", "IssuesFound", "step 12: gradients/0.weight")]
    assert description["ProfilerRuleEvaluationStatuses"][0]["RuleEvaluationStatus"] == "NoIssuesFound"
