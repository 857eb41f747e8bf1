"""The profiling report of a job: one self-contained HTML file (inline SVG, no scripts, no network), in
the order of SageMaker's: the job summary, the rules table (each rule's description, recommendation,
trigger count, data points and finding), system usage per instance (utilisation over time and
statistics), the framework metrics summary (time in steps vs others; forward, backward, optimizer and
dataloader wait within the steps; CPU vs GPU operator time and the most expensive operators from the
detailed torch.profiler traces), step durations with their outliers per instance, and data loading
(parallel loader processes against the cores, loading times, wait against compute per step).
`shipyard report JOB` writes it into the job's directory; the rules are evaluated over the data as it
is now (the job may still run)."""

from __future__ import annotations

import time
from collections import defaultdict
from html import escape
from pathlib import Path

from shipyard.contract.profiler import DATALOADER_ITER, DATALOADER_WORKER
from shipyard.rules.profiler import charts, profiler_report
from shipyard.rules.profiler.data import ProfilerData, ProfilerReader
from shipyard.rules.profiler.dataloader import node_stats
from shipyard.rules.profiler.overall_framework_metrics import NO_TRACES, PHASES
from shipyard.rules.profiler.overall_system_usage import UNITS
from shipyard.spec.rule_parameters import parse_parameters
from shipyard.spec.rules import rule_module

STYLE = """body{font-family:sans-serif;margin:24px;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;text-align:left;vertical-align:top}
table.rules td:nth-child(3),table.rules td:nth-child(4),table.rules td:nth-child(5){min-width:200px}
table.rules td:nth-child(8){font-size:11px;color:#555}
th{background:#f3f3f3}.IssuesFound{color:#d62728;font-weight:bold}.NoIssuesFound{color:#2ca02c}
table.operators td:first-child{word-break:break-all;max-width:600px}
.chart{display:block;margin:8px 0}h4{margin:12px 0 0;font-size:13px;font-weight:normal;color:#555}"""


def _table(header: list[str], rows: list[list], css: str = "") -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    attribute = f' class="{css}"' if css else ""
    return f"<table{attribute}><tr>{head}</tr>{body}</table>"


def _chart(caption: str, svg: str) -> str:
    """A chart with its caption visible above it (the SVG's <title> is only a tooltip)."""
    return f"<h4>{escape(caption)}</h4>{svg}"


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
    params = _report_parameters(spec)
    findings = profiler_report.evaluate_all(data, params, time.time(), final=record.terminal)
    sections = [f"<h1>Profiling report: {escape(spec.job_name)}</h1>",
                f"<p>Generated {time.strftime('%Y-%m-%d %H:%M:%S')}; job status {escape(record.status)}.</p>",
                *_summary(record, data, findings, spec), *_rules(findings, statuses, params),
                *_system(data, findings, _group_of(spec)),
                *_framework(data, findings), *_steps(data, findings), *_dataloader(data)]
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Profiling report '
            f"{escape(spec.job_name)}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(sections) + "\n</body></html>\n")


def _group_of(spec) -> dict[str, str]:
    """A heterogeneous job's host -> 'group (instance type)'; {} for one group."""
    if not spec.instance_groups:
        return {}
    return {host: f"{g['instance_group_name']} ({g['instance_type']})" for g in spec.groups for host in g["hosts"]}


def _summary(record, data: ProfilerData, findings, spec) -> list[str]:
    start = record.training_start_time or record.creation_time
    end = record.training_end_time
    rows = [["start", _when(start)], ["end", _when(end) if end else "still running"],
            ["nodes", escape(", ".join(data.nodes)) or "none yet"], ["steps recorded", len(data.steps)]]
    if spec.instance_groups:
        rows.insert(3, ["instance groups", escape("; ".join(
            f"{g['instance_group_name']}: {', '.join(g['hosts'])} ({g['instance_type']})" for g in spec.groups))])
    init = findings["MaxInitializationTime"].stats
    if "first_step" in init:
        loop = init["last_step"] - init["first_step"]
        rows += [["training loop start", _when(init["first_step"])], ["training loop end", _when(init["last_step"])],
                 ["initialization (s)", f"{init['initialization_seconds']:.1f}"], ["training loop (s)", f"{loop:.1f}"]]
        if end and start:
            total = max(end - start, 1e-9)
            final = max(end - init["last_step"], 0.0)
            rows += [["finalization (s)", f"{final:.1f}"], ["job duration (s)", f"{end - start:.1f}"],
                     ["initialization / training loop / finalization",
                      f"{100 * init['initialization_seconds'] / total:.0f}% / {100 * loop / total:.0f}% / "
                      f"{100 * final / total:.0f}%"]]
    return ['<h2 id="summary">Training job summary</h2>', _table(["", ""], rows)]


def _rules(findings, statuses: list[dict], params: dict) -> list[str]:
    """Every profiler rule, those that found most first, as SageMaker's rules summary."""
    status_of = {s["rule"]: s for s in statuses}
    rows = []
    for rule, finding in sorted(findings.items(), key=lambda kv: -kv[1].violations):
        module = rule_module("profiler", rule)
        stored = status_of.get(rule)
        status = stored["status"] if stored else ("IssuesFound" if finding.triggered else "NoIssuesFound")
        shown = ", ".join(f"{k}={v}" for k, v in profiler_report.sub_parameters(rule, params).items()
                          if k != "scan_interval_us") or "—"
        rows.append([escape(rule), f'<span class="{status}">{status}</span>', escape(module.DESCRIPTION),
                     escape(module.RECOMMENDATION), escape(finding.details), finding.violations, finding.datapoints,
                     escape(shown)])
    out = ['<h2 id="rules">Rules summary</h2>',
           _table(["Rule", "Status", "Description", "Recommendation", "Finding", "Triggered", "Datapoints",
                   "Parameters"], rows, "rules")]
    others = [s for s in statuses if s["rule"] not in findings]
    if others:
        out.append(_table(["Job rule", "Status", "Details"],
                          [[escape(s["rule"]), f'<span class="{s["status"]}">{s["status"]}</span>',
                            escape(s["details"] or "")] for s in others]))
    return out


def _system(data: ProfilerData, findings, groups: dict[str, str]) -> list[str]:
    out, usage = ['<h2 id="system">System usage</h2>'], findings["OverallSystemUsage"].stats
    for node in data.nodes:
        out.append(f"<h3>{escape(node)}{escape(f', group {groups[node]}') if node in groups else ''}</h3>")
        out.append(_chart(f"{node} utilisation over time (%)",
                          charts.line_chart(f"{node} utilisation", _utilisation(data, node), "%", y_max=100)))
        out.append(_table(["metric", "unit", "max", "p99", "p95", "p50", "min"],
                          [[m, UNITS[m], *(f"{s[k]:.1f}" for k in ("max", "p99", "p95", "p50", "min"))]
                           for m, s in usage.get(node, {}).items() if s]))
    return out


def _framework(data: ProfilerData, findings) -> list[str]:
    """Where the training processes' time went, per node, from OverallFrameworkMetrics."""
    stats = findings["OverallFrameworkMetrics"].stats
    nodes = [n for n in data.nodes if n in stats and stats[n]["step_time"]]
    if not nodes:
        return ['<h2 id="framework">Framework metrics summary</h2>',
                "<p>No step times: give profiler_config a framework_profile_params to record them.</p>",
                *_operators(data, stats)]
    phases, rows = {}, []
    for node in nodes:
        m = stats[node]
        within = {**m["phases"], "dataloader wait": m["dataloader_wait"]}
        phases[node] = {**within, "rest of the step": max(m["step_time"] - sum(within.values()), 0.0)}
        rows.append([escape(node), f"{m['step_time']:.2f}", f"{m['others']:.2f}",
                     *(f"{m['phases'].get(p, 0.0):.2f}" for p in PHASES), f"{m['dataloader_wait']:.2f}",
                     f"{m['dataloader_workers']:.2f}"])
    out = ['<h2 id="framework">Framework metrics summary</h2>',
           "<p>Seconds summed over each node's training processes. Backward(post-forward) spans from the end of "
           "a step's last forward pass to the start of optimizer.step().</p>",
           _table(["node", "steps (s)", "others (s)", *(f"{p} (s)" for p in PHASES), "dataloader wait (s)",
                   "dataloader workers (s)"], rows),
           _chart("Time in TRAIN/EVAL steps vs others (between the first and last step)",
                  charts.share_bars("steps vs others", {n: {**{f"{mode} steps": t for mode, t in stats[n]["steps"].items()},
                                                             "others": stats[n]["others"]} for n in nodes}))]
    if any(stats[n]["phases"] or stats[n]["dataloader_wait"] for n in nodes):
        out.append(_chart("Within the steps: forward, backward, optimizer and dataloader wait",
                          charts.share_bars("step phases", phases)))
    return out + _operators(data, stats)


def _operators(data: ProfilerData, stats) -> list[str]:
    """CPU vs GPU operator time per node and each node's most expensive operators, from the detailed traces."""
    summaries = {n: stats[n]["operators"] for n in data.nodes if n in stats and stats[n]["operators"]}
    if not summaries:
        return ['<h3 id="operators">Operators</h3>',
                f"<p>{NO_TRACES.capitalize()}: give FrameworkProfile a detailed_profiling_config to record "
                "torch.profiler operators.</p>"]
    out = ['<h3 id="operators">Operators</h3>',
           "<p>From the detailed torch.profiler traces, summed over each node's traces. CPU operator time counts "
           "only the top-level operators of each thread (a nested operator's time is in its caller's); an "
           "operator's total includes the operators it calls.</p>",
           _chart("CPU vs GPU operator time",
                  charts.share_bars("CPU vs GPU operators", {n: {"CPU operators": m["cpu"], "GPU operators": m["gpu"]}
                                                              for n, m in summaries.items()}))]
    for node, m in summaries.items():
        for device in ("CPU", "GPU"):
            if m["top"][device]:
                out.append(f"<h4>{escape(node)}: top {device} operators ({m['traces']} trace(s))</h4>")
                out.append(_table(["operator", "calls", "total (ms)", f"% of {device} operator time"],
                                  [[escape(op["name"]), op["calls"], f"{op['total_ms']:.2f}", f"{op['share']:.1f}"]
                                   for op in m["top"][device]], "operators"))
    return out


def _steps(data: ProfilerData, findings) -> list[str]:
    out, outliers = ['<h2 id="steps">Step durations</h2>'], findings["StepOutlier"].stats
    for node in data.nodes:
        for mode in sorted({s.mode for s in data.step_durations(node)}):
            steps = data.step_durations(node, mode)
            found = outliers.get(node, {}).get(mode, {})
            limit = found.get("limit")
            out.append(f"<h3>{escape(node)} {escape(mode)}</h3>")
            out.append(_chart(f"{node} {mode} step durations by step (outliers in red, above the dashed limit)",
                              charts.step_chart(f"{node} step durations", [(s.step, s.duration) for s in steps], limit)))
            normal = [s.duration for s in steps if limit is None or s.duration <= limit]
            out.append(_chart(f"{node} {mode} step duration histogram (outliers left out)",
                              charts.histogram(f"{node} step duration histogram", normal)))
            if found.get("outliers"):
                out.append(f"<p>{len(found['outliers'])} outliers above {limit:.4f}s (mean {found['mean']:.4f}s): "
                           + escape(", ".join(f"step {s} ({d:.3f}s)" for s, d in found["outliers"][:20])) + "</p>")
            elif found:
                out.append(f"<p>No outliers above {limit:.4f}s (mean {found['mean']:.4f}s).</p>")
    return out


def _dataloader(data: ProfilerData) -> list[str]:
    """Per node: parallel loader processes against the cores, loading times, and the wait per step."""
    loaders = {node: node_stats(data, node) for node in data.nodes}
    waiting = [n for n in data.nodes if any(s.dataloader for s in data.step_durations(n))]
    if not waiting and not any(loaders.values()):
        return []
    out, rows = ['<h2 id="dataloader">Data loading</h2>'], []
    for node in data.nodes:
        stats, steps = loaders[node], data.step_durations(node)
        total, wait = sum(s.duration for s in steps), sum(s.dataloader for s in steps)
        times = stats["dataloading_time"] if stats else {}
        rows.append([escape(node), stats["cores"] if stats else "", stats["dataloaders"] if stats else "",
                     stats["processes"] if stats else "", escape(str(stats.get("num_workers", ""))) if stats else "",
                     escape(str(stats.get("pin_memory", ""))) if stats else "",
                     *(f"{times[q] * 1000:.1f}" if times else "" for q in ("p25", "p50", "p95")),
                     f"{100 * wait / total:.1f}" if total else ""])
    out.append(_table(["node", "cores", "median parallel loader processes", "loader processes", "num_workers",
                       "pin_memory", "loading p25 (ms)", "p50 (ms)", "p95 (ms)", "wait % of step time"], rows))
    for node in waiting:
        per_step: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for s in data.step_durations(node, "TRAIN"):
            per_step[s.step].append((s.dataloader, max(s.duration - s.dataloader, 0.0)))
        mean = {step: [sum(v) / len(v) for v in zip(*pairs)] for step, pairs in sorted(per_step.items())}
        out.append(_chart(f"{node} dataloader wait and compute per step (mean over ranks)", charts.line_chart(
            f"{node} dataloader wait and compute per step",
            {"dataloader wait": [(step, w) for step, (w, _) in mean.items()],
             "compute": [(step, c) for step, (_, c) in mean.items()]}, "seconds", x_label="step", from_zero=False)))
    for node in data.nodes:
        fetches = [e.duration for e in data.framework_events(node, (DATALOADER_WORKER,))] or \
                  [e.duration for e in data.framework_events(node, (DATALOADER_ITER,))]
        if fetches:
            out.append(_chart(f"{node} dataloading time histogram", charts.histogram(
                f"{node} dataloading time", fetches, x_label="seconds per batch", y_label="batches")))
    return out


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else ""


def write_report(store, job: str) -> Path:
    from shipyard.errors import ValidationError

    record = store.get_job(job)
    spec = record.spec
    data = None
    if spec.profiler_config is not None:   # turned off while it ran (disable_profiling()): what it recorded
        data = ProfilerReader(spec.profiler_config.output_uri(spec.output_path, spec.job_name)).read()
    if data is None or (spec.profiler_config.disable_profiler and not data.nodes):
        raise ValidationError("job", job, "the job ran without profiling; give profiler_config=ProfilerConfig() to profile it")
    path = store.job_dir(job) / "profiler-report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(spec, record, data, store.rule_statuses(job, "profiler")))
    return path
