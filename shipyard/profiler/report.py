"""The profiling report of a job: one self-contained HTML file (inline SVG, no scripts, no network) with
the job summary, utilisation over time per instance, system usage statistics, step durations with their
outliers, dataloader wait against compute, and every profiler rule's finding with its recommendation. `shipyard report JOB` writes it
into the job's directory; the rules are evaluated over the data as it is now (the job may still run)."""

from __future__ import annotations

import time
from html import escape
from pathlib import Path

from shipyard.profiler import charts
from shipyard.profiler.data import ProfilerData, ProfilerReader
from shipyard.rules import rule_module
from shipyard.rules.parameters import parse_parameters
from shipyard.rules.profiler import profiler_report
from shipyard.rules.profiler.overall_system_usage import UNITS

STYLE = """body{font-family:sans-serif;margin:24px;max-width:1000px;color:#222}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;text-align:left}
th{background:#f3f3f3}.IssuesFound{color:#d62728;font-weight:bold}.NoIssuesFound{color:#2ca02c}
.chart{display:block;margin:8px 0}"""


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _utilisation(data: ProfilerData, node: str) -> dict[str, list[tuple[float, float]]]:
    """CPU (mean over cores), CPU memory and GPU (mean over GPUs) per snapshot."""
    series: dict[str, list[tuple[float, float]]] = {}
    for _, ts, records in data.snapshots(node):
        for label, type_, dimension in (("CPU", "cpu", "CPUUtilization"), ("CPU memory", "memory", ""),
                                        ("GPU", "gpu", "GPUUtilization"), ("GPU memory", "gpu", "GPUMemoryUtilization")):
            values = [r["Value"] for r in records if r["Type"] == type_ and r["Dimension"] == dimension]
            if values:
                series.setdefault(label, []).append((ts, sum(values) / len(values)))
    return series


def _report_parameters(spec) -> dict:
    """The job's ProfilerReport parameters when it has that rule, else every sub-rule's defaults."""
    rule = next((r for r in spec.rules if r.kind == "profiler" and r.rule == "ProfilerReport"), None)
    return parse_parameters("ProfilerReport", profiler_report.PARAMETERS, rule.parameters if rule else {})


def render(spec, record, data: ProfilerData, statuses: list[dict]) -> str:
    findings = profiler_report.evaluate_all(data, _report_parameters(spec), time.time(), final=record.terminal)
    sections = [f"<h1>Profiling report: {escape(spec.job_name)}</h1>",
                f"<p>Generated {time.strftime('%Y-%m-%d %H:%M:%S')}; job status {escape(record.status)}.</p>"]
    init = findings["MaxInitializationTime"].stats
    summary = [["start", _when(record.training_start_time or record.creation_time)],
               ["end", _when(record.training_end_time) if record.training_end_time else "still running"],
               ["nodes", escape(", ".join(data.nodes)) or "none yet"],
               ["steps recorded", len(data.steps)]]
    if "first_step" in init:
        summary += [["training loop start", _when(init["first_step"])], ["training loop end", _when(init["last_step"])],
                    ["initialization (s)", f"{init['initialization_seconds']:.1f}"],
                    ["training loop (s)", f"{init['last_step'] - init['first_step']:.1f}"]]
    sections += ["<h2>Training job summary</h2>", _table(["", ""], summary)]

    sections.append("<h2>Rules summary</h2>")
    status_of = {s["rule"]: s for s in statuses}
    rows = []
    for rule, finding in sorted(findings.items(), key=lambda kv: -kv[1].violations):
        module = rule_module("profiler", rule)
        stored = next((s for name, s in status_of.items() if name == rule), None)
        status = stored["status"] if stored else ("IssuesFound" if finding.triggered else "NoIssuesFound")
        params = ", ".join(f"{k}={v}" for k, v in profiler_report.sub_parameters(rule, _report_parameters(spec)).items()
                           if k != "scan_interval_us")
        rows.append([escape(rule), f'<span class="{status}">{status}</span>', escape(module.DESCRIPTION),
                     escape(module.RECOMMENDATION) if finding.triggered else "", escape(finding.details),
                     finding.violations, finding.datapoints, escape(params)])
    sections.append(_table(["Rule", "Status", "Description", "Recommendation", "Finding", "Triggered",
                            "Datapoints", "Parameters"], rows))
    others = [s for s in statuses if s["rule"] not in findings]
    if others:
        sections.append(_table(["Job rule", "Status", "Details"],
                               [[escape(s["rule"]), f'<span class="{s["status"]}">{s["status"]}</span>',
                                 escape(s["details"] or "")] for s in others]))

    sections.append("<h2>System usage</h2>")
    usage = findings["OverallSystemUsage"].stats
    for node in data.nodes:
        sections.append(f"<h3>{escape(node)}</h3>")
        sections.append(charts.line_chart(f"{node} utilisation", _utilisation(data, node), "%", y_max=100))
        stats = usage.get(node, {})
        sections.append(_table(["metric", "unit", "max", "p99", "p95", "p50", "min"],
                               [[m, UNITS[m], *(f"{s[k]:.1f}" for k in ("max", "p99", "p95", "p50", "min"))]
                                for m, s in stats.items() if s]))

    sections.append("<h2>Step durations</h2>")
    outliers = findings["StepOutlier"].stats
    for node in data.nodes:
        steps = data.step_durations(node)
        if not steps:
            continue
        limit = outliers.get(node, {}).get("limit")
        sections.append(f"<h3>{escape(node)}</h3>")
        sections.append(charts.step_chart(f"{node} step durations", [(s.step, s.duration) for s in steps], limit))
        normal = [s.duration for s in steps if limit is None or s.duration <= limit]
        sections.append(charts.histogram(f"{node} step duration histogram (outliers left out)", normal))
        if node in outliers:
            found = outliers[node]["outliers"]
            sections.append(f"<p>{len(found)} outliers above {limit:.4f}s: "
                            + escape(", ".join(f"step {s} ({d:.3f}s)" for s, d in found[:20])) + "</p>")
    sections += _dataloader(data)
    if not data.steps:
        sections.append("<p>No step times: give profiler_config a framework_profile_params to record them.</p>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Profiling report '
            f"{escape(spec.job_name)}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(sections) + "\n</body></html>\n")


def _dataloader(data: ProfilerData) -> list[str]:
    """Per node: how much of the step time went to waiting for DataLoader batches."""
    nodes = [n for n in data.nodes if any(s.dataloader for s in data.step_durations(n))]
    if not nodes:
        return []
    out, rows = ["<h2>Dataloader wait vs compute</h2>"], []
    for node in nodes:
        steps = data.step_durations(node)
        total, waiting = sum(s.duration for s in steps), sum(s.dataloader for s in steps)
        rows.append([escape(node), len(steps), f"{total:.2f}", f"{waiting:.2f}", f"{100 * waiting / total:.1f}"])
        out.append(charts.line_chart(f"{node} dataloader wait and compute per step", {
            "dataloader wait": [(s.step, s.dataloader) for s in steps],
            "compute": [(s.step, max(s.duration - s.dataloader, 0.0)) for s in steps]}, "seconds",
            x_label="step", from_zero=False))
    return [out[0], _table(["node", "steps", "step time (s)", "dataloader wait (s)", "wait %"], rows), *out[1:]]


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else ""


def write_report(store, job: str) -> Path:
    from shipyard.errors import ValidationError

    record = store.get_job(job)
    spec = record.spec
    if spec.profiler_config is None or spec.profiler_config.disable_profiler:
        raise ValidationError("job", job, "the job ran without profiling; give profiler_config=ProfilerConfig() to profile it")
    data = ProfilerReader(spec.profiler_config.output_uri(spec.output_path, spec.job_name)).read()
    path = store.job_dir(job) / "profiler-report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(spec, record, data, store.rule_statuses(job, "profiler")))
    return path
