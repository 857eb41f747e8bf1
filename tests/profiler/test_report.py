"""The reader over files written as contract 3 says (steps, phases, dataloader events from the training
processes and their workers), and the report's HTML from a synthetic 2-node job (no job needed): the
job's own rule settings and the limits they draw, shares that add up to 100 and agree between the
rules' findings and the charts, nice ticks, one offline file."""

from __future__ import annotations

import json
import math
import random
import re
import shutil
from collections import defaultdict
from types import SimpleNamespace

import pytest

from shipyard.contract.profiler import system_file
from shipyard.profiler import ProfilerRule, rule_configs
from shipyard.rules.profiler import charts
from shipyard.rules.profiler.data import ProfilerReader
from shipyard.rules.profiler.profiler_report import SUB_RULES
from shipyard.rules.profiler.report import render
from shipyard.spec.job import JobSpec
from shipyard.spec.profiler import ProfilerConfig

T0 = 1_795_000_020.0  # epoch seconds of the first record
NODES = {"algo-1": 2, "algo-2": 0}  # node -> the DataLoader's num_workers on each of its 2 ranks
STEPS, STEP_SECONDS, OUTLIER = 150, 0.3, ("algo-2", 120)


def _trace(root, node: str, rank: int, end_us: int, events: list[dict], t0_us: int) -> None:
    directory = root / "framework" / "pevents" / "2026110912"
    directory.mkdir(parents=True, exist_ok=True)
    meta = {"name": "process_name", "ph": "M", "pid": rank, "args": {"start_time_since_epoch_in_micros": t0_us}}
    for e in events:
        e["ts"] -= t0_us
    (directory / f"{end_us}_{node}-rank{rank}_model_timeline.json").write_text(json.dumps([meta, *events]))


def _event(name, rank, start, duration, **args) -> dict:
    return {"name": name, "ph": "X", "pid": rank, "tid": 0, "ts": int(start * 1e6), "dur": int(duration * 1e6),
            "args": args}


def _detailed_trace(root, node: str, rank: int) -> None:
    """A detailed torch.profiler trace of step 5: per step a Linear forward on the CPU (aten::linear calling
    aten::addmm) launching a 3 ms GPU kernel, and a 1 ms copy to the GPU."""
    directory = root / "framework" / "pytorch" / "detailed_profiling" / "2026110912" / "000000005"
    directory.mkdir(parents=True, exist_ok=True)
    events = [_event("ProfilerStep#5", rank, 0, 0.01) | {"cat": "user_annotation"},
              _event("aten::linear", rank, 0.001, 0.002) | {"cat": "cpu_op"},
              _event("aten::addmm", rank, 0.0015, 0.001) | {"cat": "cpu_op"},
              _event("volta_sgemm_128x64_nn", 0, 0.003, 0.003) | {"cat": "kernel", "tid": 7},
              _event("Memcpy HtoD (Pageable -> Device)", 0, 0.002, 0.001) | {"cat": "gpu_memcpy", "tid": 7}]
    (directory / f"{node}-rank{rank}.pt.trace.json").write_text(json.dumps({"traceEvents": events}))


def write_two_node_job(root) -> None:
    """What a 2-node, 2-ranks-per-node PyTorch job leaves in profiler-output: a minute of system metrics
    (4 cores, 2 GPUs; algo-2's gpu1 mostly idle), 150 steps per rank with their phases and data loading,
    and a detailed trace of step 5 per rank; algo-1 loads with 2 workers per rank, algo-2 in the main
    processes (num_workers=0), and algo-2's step 120 is slow."""
    for n, node in enumerate(NODES):
        lines = defaultdict(list)
        for i in range(120):
            ts = T0 + i * 0.5
            rec = lambda t, name, d, v: json.dumps({"Type": t, "Name": name, "Dimension": d, "Value": v,
                                                    "NodeId": node, "Timestamp": ts})
            path = system_file(str(root), node, ts)
            lines[path] += [rec("cpu", f"cpu{c}", "CPUUtilization", 40 + 10 * c + i % 7) for c in range(4)]
            lines[path] += [rec("cpu", f"cpu{c}", "I/OWaitPercentage", 1.0) for c in range(4)]
            lines[path] += [rec("gpu", f"gpu{g}", "GPUUtilization", 5.0 if (node, g) == ("algo-2", 1) else 85 + i % 10)
                            for g in range(2)]
            lines[path] += [rec("gpu", f"gpu{g}", "GPUMemoryUtilization", 40.0) for g in range(2)]
            lines[path] += [rec("memory", "MemoryUsedPercent", "", 30 + i / 10),
                            rec("network", "ReceiveBytesPerSecond", "Algorithm", 1e6 + 1e4 * (i % 5))]
        for path, content in lines.items():
            (root / path[len(str(root)) + 1:]).parent.mkdir(parents=True, exist_ok=True)
            (root / path[len(str(root)) + 1:]).write_text("\n".join(content) + "\n")
        for rank in (2 * n, 2 * n + 1):
            os_pid, workers = 1000 + rank * 10, NODES[node]
            events, fetched, t = [_event("DataLoaderIterInitialize", rank, T0 + 1, 0.001, node=node, os_pid=os_pid,
                                         num_workers=workers, pin_memory=False)], [], T0 + 2
            rng = random.Random(rank)
            for step in range(1, STEPS + 1):
                slow = 2.0 if (node, step) == OUTLIER else rng.gauss(0, 0.01)
                wait = rng.uniform(0.06, 0.1) if workers == 0 else rng.uniform(0.005, 0.015)
                phases = [("DataLoaderIter", wait), ("Forward", 0.05), ("Backward(post-forward)", 0.12 + slow),
                          ("Optimizer", 0.03)]
                duration = STEP_SECONDS + slow + (wait - 0.01)
                events.append(_event("Step:ModeKeys.TRAIN", rank, t, duration, step_num=step, node=node, os_pid=os_pid))
                start = t
                for name, d in phases:
                    events.append(_event(name, rank, start, d, step_num=step, node=node, os_pid=os_pid))
                    start += d
                for w in range(workers):  # each worker fetches every other batch, ahead of the step
                    if step % workers == w:
                        fetched.append(_event("DataLoaderWorker", rank, t, 2 * STEP_SECONDS * rng.uniform(0.6, 0.9),
                                              worker_pid=os_pid + 1 + w, os_pid=os_pid + 1 + w, step_num=step))
                t += duration
            _trace(root, node, rank, int(t * 1e6), events, int(T0 * 1e6))
            if fetched:  # the workers' events in a file of their own, naming the node by the file name only
                _trace(root, node, rank, int(t * 1e6) + 1, fetched, int(T0 * 1e6))
            _detailed_trace(root, node, rank)


def test_reader_reads_steps_phases_and_dataloader_events_of_every_node_and_rank(tmp_path):
    write_two_node_job(tmp_path)
    data = ProfilerReader(str(tmp_path)).read()
    assert data.nodes == ["algo-1", "algo-2"]
    assert {(s.node, s.pid) for s in data.steps} == {("algo-1", 0), ("algo-1", 1), ("algo-2", 2), ("algo-2", 3)}
    assert len(data.step_durations("algo-1", "TRAIN")) == 2 * STEPS
    slow = max(data.step_durations("algo-2"), key=lambda s: s.duration)
    assert (slow.step, slow.mode) == (120, "TRAIN") and 2.3 < slow.duration < 2.4
    assert all(0.06 <= s.dataloader <= 0.1 if s.node == "algo-2" else 0.005 <= s.dataloader <= 0.015 for s in data.steps)
    workers = data.framework_events("algo-1", ("DataLoaderWorker",))
    assert {e.os_pid for e in workers} == {1001, 1002, 1011, 1012}  # args.worker_pid; node from the file name
    loaders = data.framework_events("algo-2", ("DataLoaderIter",))
    assert {e.os_pid for e in loaders} == {1020, 1030} and {e.step for e in loaders} == set(range(1, STEPS + 1))
    [init] = data.framework_events("algo-1", ("DataLoaderIterInitialize",))[:1]
    assert (init.args["num_workers"], init.args["pin_memory"], init.start) == (2, False, T0 + 1)
    forward = data.framework_events("algo-1", ("Forward",))
    assert len(forward) == 2 * STEPS and abs(forward[0].duration - 0.05) < 1e-6
    assert data.first_timestamp == T0 and len({r["Name"] for r in data.system if r["Type"] == "cpu"}) == 4


# ProfilerReport with some of its sub-rules' parameters set, and a StepOutlier of the job's own.
PROFILER_REPORT = ProfilerRule.sagemaker(rule_configs.ProfilerReport(), rule_parameters={
    "StepOutlier_n_outliers": 0, "LowGPUUtilization_patience": 10, "LoadBalancing_patience": 10})
OWN_OUTLIERS = ProfilerRule.sagemaker(rule_configs.StepOutlier(), rule_parameters={"stddev": 5})


def report(tmp_path, statuses=(), detailed=True, rules=(PROFILER_REPORT, OWN_OUTLIERS), **spec_fields) -> str:
    write_two_node_job(tmp_path)
    if not detailed:
        shutil.rmtree(tmp_path / "framework" / "pytorch")
    data = ProfilerReader(str(tmp_path)).read()
    spec = JobSpec(job_name="two-nodes", output_path="/tmp/out", profiler_config=ProfilerConfig(), rules=tuple(rules),
                   **(spec_fields or {"instance_count": 2}))
    record = SimpleNamespace(status="Completed", terminal=True, creation_time=T0 - 30, training_start_time=T0 - 30,
                             training_end_time=T0 + 2 + STEPS * STEP_SECONDS + 20)
    return render(spec, record, data, list(statuses))


def rule_rows(html: str) -> list[tuple[str, str, str]]:
    """(rule, where it comes from, status) of each row of the rules table."""
    table = html[html.index('<table class="rules">'):]
    table = table[:table.index("</table>")]
    return re.findall(r'<tr><td>(\w+)<br><small>([^<]*)</small></td>\n<td><span class="status (\w+)">', table)


def svgs(html: str) -> list[str]:
    return re.findall(r"<svg .*?</svg>", html, re.S)


def texts(svg: str) -> list[str]:
    """The texts a chart draws (as paths, each with its text in a comment)."""
    return re.findall(r"<!-- (.*?) -->", svg)


def ticks(svg: str) -> dict[str, list[str]]:
    """A chart's tick labels, per axis."""
    out = {"x": [], "y": []}
    for axis, label in re.findall(r'id="c\d+-([xy])tick_\d+">.*?<!-- (.*?) -->', svg, re.S):
        out[axis].append(label)
    return out


def assert_nice(labels: list[str]) -> None:
    """Evenly spaced by 1, 2 or 5 × 10^k, each label with no more decimals than that spacing needs."""
    values = [float(label) for label in labels]
    assert len(values) >= 2, labels
    step = values[1] - values[0]
    assert all(math.isclose(b - a, step, rel_tol=1e-6) for a, b in zip(values, values[1:])), labels
    exponent = math.floor(math.log10(step) + 1e-9)
    assert round(step / 10 ** exponent, 6) in (1, 2, 5), labels
    assert all(len(label.partition(".")[2]) <= max(0, -exponent) for label in labels), labels


def test_report_sections_rules_table_and_charts(tmp_path):
    html = report(tmp_path, [{"rule": "MyOutliers", "status": "IssuesFound", "details": "x <y>"}])
    for section in ("summary", "rules", "system", "framework", "steps", "dataloader"):
        assert f'<h2 id="{section}">' in html, section
    # per node: utilisation, steps, step histogram, dataloading histogram; algo-1: wait vs compute (algo-2 too);
    # steps vs others, step phases, CPU vs GPU operators
    assert html.count("<svg") == 2 * 5 + 3
    rows = rule_rows(html)
    # The 11 rules ProfilerReport runs and the job's own StepOutlier.
    assert len(rows) == 12 and sum(where == "in job rule ProfilerReport" for _, where, _ in rows) == 11
    status = {rule: s for rule, where, s in rows if where == "in job rule ProfilerReport"}
    assert status["Dataloader"] == "IssuesFound" and status["OverallFrameworkMetrics"] == "NoIssuesFound"
    # sorted by trigger count: algo-2 gpu1 against the 3 other GPUs, step 120 on both ranks of algo-2, ...
    assert [r for r, _, s in rows if s == "IssuesFound"] == ["LoadBalancing", "StepOutlier", "LowGPUUtilization",
                                                             "Dataloader"]
    assert "algo-2: median 2 parallel dataloader processes for 4 cores (num_workers=0, pin_memory=False)" in html
    assert "raise the DataLoader&#39;s num_workers" in html  # each rule's recommendation
    assert "algo-1 gpu0 and algo-2 gpu1 differ" in html  # LoadBalancing across nodes
    assert re.search(r"ProfilerReport/StepOutlier \(stddev 3\): 2 outliers above [\d.]+s \(mean [\d.]+s\): "
                     r"step 120 \(2.3\d\ds\), step 120", html)
    assert "StepOutlier (stddev 5): 2 outliers above" in html
    assert "ProfilerReport/StepOutlier (stddev 3): no outliers above" in html  # algo-1
    assert "MyOutliers" in html and "x &lt;y&gt;" in html  # the job's own statuses, escaped
    # Per node 2 ranks' traces: 4 ms of top-level CPU operators (aten::linear), 8 ms on the GPU.
    assert "operators (4 detailed trace(s)): CPU 33%, GPU 67% of 24ms" in html
    operators = html[html.index('<h3 id="operators">'):html.index('<h2 id="steps">')]
    assert "CPU vs GPU operator time" in operators
    assert operators.count("top CPU operators (2 trace(s))") == operators.count("top GPU operators (2 trace(s))") == 2
    # Self times: aten::linear's 2 ms less its aten::addmm's 1 ms, per rank.
    assert "<tr><td>aten::linear</td><td>2</td><td>2.000</td><td>50.0</td></tr>" in operators
    assert "<tr><td>aten::addmm</td><td>2</td><td>2.000</td><td>50.0</td></tr>" in operators
    assert "<tr><td>volta_sgemm_128x64_nn</td><td>2</td><td>6.000</td><td>75.0</td></tr>" in operators


def test_the_jobs_own_rule_settings_are_shown_and_drawn(tmp_path):
    """StepOutlier(stddev=5) on the job: its row names it and its parameter (set on the job: bold), the
    step charts draw its limit, mean + 5 std of the node's steps; without a ProfilerReport rule the other
    rules run at their defaults and no default StepOutlier is drawn besides the job's."""
    html = report(tmp_path, rules=(OWN_OUTLIERS,))
    rows = rule_rows(html)
    assert ("StepOutlier", "job rule StepOutlier", "NoIssuesFound") in rows  # 2 outliers, n_outliers 10
    defaults = {r for r, where, _ in rows if where.startswith("default")}
    assert len(rows) == len(SUB_RULES) and defaults == set(SUB_RULES) - {"StepOutlier"}
    row = html[html.index("job rule StepOutlier"):].replace("<wbr>", "")
    row = row[:row.index("</tr>")]
    assert "<li><b>stddev=5</b></li>" in row and "<li>n_outliers=10</li>" in row and "stddev=3" not in html
    data = ProfilerReader(str(tmp_path)).read()
    step_charts = [svg for svg in svgs(html) if "step durations" in svg.split(">", 1)[0]]
    assert len(step_charts) == 2
    for node, svg in zip(NODES, step_charts):
        durations = [s.duration for s in data.step_durations(node, "TRAIN")]
        mean = sum(durations) / len(durations)
        limit = mean + 5 * math.sqrt(sum((d - mean) ** 2 for d in durations) / len(durations))
        [legend] = [t for t in texts(svg) if "std" in t]
        assert legend == f"StepOutlier: mean + 5 std = {limit:.3g} s", node
    assert "outlier" in texts(step_charts[1]) and "outlier" not in texts(step_charts[0])  # algo-2's step 120


def test_the_step_outlier_limit_of_profiler_report_is_drawn_too(tmp_path):
    html = report(tmp_path)
    [algo_2] = [svg for svg in svgs(html) if 'aria-label="algo-2 step durations (TRAIN)"' in svg]
    legends = [t for t in texts(algo_2) if "std" in t]
    assert [legend.split(" = ")[0] for legend in legends] == ["StepOutlier: mean + 5 std",
                                                              "ProfilerReport/StepOutlier: mean + 3 std"]


def test_shares_add_up_to_100_and_the_charts_draw_the_rules_numbers(tmp_path, monkeypatch):
    drawn = {}
    share_bars = charts.share_bars
    monkeypatch.setattr(charts, "share_bars", lambda title, rows: drawn.setdefault(title, rows) and
                        share_bars(title, rows))
    html = report(tmp_path)
    # The job's duration: initialization, training loop and finalization.
    [shares] = re.findall(r"<tr><td>initialization / training loop / finalization</td>"
                          r"<td>(\d+)% / (\d+)% / (\d+)%</td>", html)
    assert sum(map(int, shares)) == 100
    # Every bar chart's rows add up to 100; "all nodes" is what OverallFrameworkMetrics' finding says.
    assert set(drawn) == {"steps vs others", "step time", "CPU vs GPU operators"}
    assert all(sum(row.values()) == 100 for rows in drawn.values() for row in rows.values())
    assert all(list(rows) == ["algo-1", "algo-2", "all nodes"] for rows in drawn.values())
    [finding] = re.findall(r"<td>(\d+ steps, [\d.]+s of step time .*?)</td>", html)
    said = [part.rsplit(" ", 1) for part in finding.split("; step time: ")[1].split(";")[0].split(", ")]
    assert {name: float(share.rstrip("%")) for name, share in said} == drawn["step time"]["all nodes"]
    assert "CPU 33%, GPU 67%" in finding
    assert drawn["CPU vs GPU operators"]["all nodes"] == {"CPU": 33, "GPU": 67}
    # And the chart writes those numbers on its bars.
    [parts_chart] = [svg for svg in svgs(html) if 'aria-label="step time"' in svg]
    assert {f"{v:.0f}%" for v in drawn["step time"]["all nodes"].values() if v >= charts.LABELLED} <= \
        set(texts(parts_chart))


def test_charts_have_nice_ticks_whole_step_numbers_and_units(tmp_path):
    html = report(tmp_path)
    for svg in svgs(html):
        title = re.search(r'aria-label="([^"]*)"', svg).group(1)
        labels = ticks(svg)
        for axis in ("x", "y"):
            if not (title in ("steps vs others", "step time", "CPU vs GPU operators") and axis == "y"):  # node names
                assert_nice(labels[axis])
        if "step" in texts(svg):  # an x axis of step numbers
            assert all("." not in label for label in labels["x"]), title
    utilisation = [svg for svg in svgs(html) if "utilisation" in svg.split(">", 1)[0]]
    assert all(ticks(svg)["y"] == ["0", "20", "40", "60", "80", "100"] and "utilisation (%)" in texts(svg)
               for svg in utilisation)
    assert "<tr><td>Network</td><td>MB/s</td><td>1.04</td>" in html  # 1e6 + 4e4 bytes/s at most


@pytest.mark.parametrize("labels", [["0", "1.38", "2.75"], ["0.00", "0.25", "0.50"], ["0.0", "2.0", "4.0"], ["3"]])
def test_ticks_users_saw_are_not_nice(labels):
    with pytest.raises(AssertionError):
        assert_nice(labels)


@pytest.mark.parametrize("labels", [["0.0", "0.5", "1.0"], ["1", "1.5", "2"], ["0", "200", "400"], ["0.060", "0.065"]])
def test_nice_ticks(labels):
    assert_nice(labels)


def test_report_without_detailed_traces_says_so(tmp_path):
    html = report(tmp_path, detailed=False)
    assert "No detailed profiling traces: give FrameworkProfile a detailed_profiling_config" in html
    assert "operator time" not in html and html.count("<svg") == 2 * 5 + 2


def test_report_is_one_offline_file_with_unique_ids(tmp_path):
    html = report(tmp_path)
    assert html.startswith("<!DOCTYPE html>")
    # Charts refer only to their own parts, by fragment.
    assert set(re.findall(r"url\(#?|href=\"#?", html)) == {"url(#", 'href="#'}
    ids = re.findall(r' id="([^"]+)"', html)
    assert len(ids) == len(set(ids))
    html = html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    for fetching in ("http:", "https:", "//", "<script", "<link", "<img", "<iframe", "src=", "@import"):
        assert fetching not in html, fetching


def test_job_text_is_escaped(tmp_path):
    html = report(tmp_path, [{"rule": "Mine<b>", "status": "Error", "details": "<script>alert(1)</script>"}])
    assert "Mine&lt;b&gt;" in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script" not in html


def test_report_shows_each_hosts_instance_group(tmp_path):
    html = report(tmp_path, instance_groups=[
        {"instance_group_name": "data", "instance_type": "local", "instance_count": 1},
        {"instance_group_name": "train", "instance_type": "local_gpu", "instance_count": 1}])
    assert "<tr><td>instance groups</td><td>data: algo-1 (local); train: algo-2 (local_gpu)</td></tr>" in html
    assert "<h3>algo-1, group data (local)</h3>" in html and "<h3>algo-2, group train (local_gpu)</h3>" in html
    assert "instance groups" not in report(tmp_path / "plain")
