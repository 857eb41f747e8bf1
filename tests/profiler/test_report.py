"""The report's HTML from synthetic data, and the trace files it reads (no job needed)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from shipyard.profiler.data import ProfilerData, parse_trace
from shipyard.profiler.report import render
from shipyard.spec.job import JobSpec
from shipyard.spec.profiler import ProfilerConfig
from tests.profiler.test_rules import steps, system


def test_trace_files_give_steps_with_their_dataloader_wait():
    events = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"start_time_since_epoch_in_micros": 10_000_000}},
              {"name": "DataLoaderIter", "ph": "X", "pid": 1, "ts": 0, "dur": 200_000, "args": {"step_num": 2}},
              {"name": "DataLoaderIter", "ph": "X", "pid": 1, "ts": 200_000, "dur": 100_000, "args": {"step_num": 2}},
              {"name": "Step:ModeKeys.TRAIN", "ph": "X", "pid": 1, "ts": 0, "dur": 500_000,
               "args": {"step_num": 2, "node": "algo-2"}}]
    [step] = parse_trace(json.dumps(events))
    assert (step.node, step.pid, step.step, step.start, step.duration) == ("algo-2", 1, 2, 10.0, 0.5)
    assert abs(step.dataloader - 0.3) < 1e-9


def test_report_has_charts_findings_and_no_network():
    durations = [0.1] * 150
    durations[140] = 3.0
    data = ProfilerData(system=system(20, cpus=(50, 70)) + system(20, node="algo-2", cpus=(10, 20)),
                        steps=steps(durations) + steps([0.2] * 50, node="algo-2"))
    spec = JobSpec(job_name="j", instance_count=2, output_path="/tmp/out", profiler_config=ProfilerConfig())
    record = SimpleNamespace(status="Completed", terminal=True, creation_time=1.0, training_start_time=1.0,
                             training_end_time=2.0)
    html = render(spec, record, data, [{"rule": "MyOutliers", "status": "IssuesFound", "details": "x <y>"}])
    assert html.startswith("<!DOCTYPE html>") and html.count("<svg") == 6  # per node: utilisation, steps, step histogram
    assert "algo-1 utilisation" in html and "algo-2 utilisation" in html
    assert "1 outliers above" in html and "step 141 (3.000s)" in html
    assert "MyOutliers" in html and "x &lt;y&gt;" in html  # the job's own statuses, escaped
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
