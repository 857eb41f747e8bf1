"""The profiling report of a job: one self-contained HTML file (inline SVG charts drawn by charts.py, no
scripts, no network), the page laid out by templates/report.html (Jinja2, everything shown escaped), in
the order of SageMaker's: the job summary, the rules table (each rule's description, recommendation,
trigger count, data points, finding and the settings it ran with), system usage per instance
(utilisation over time and statistics), the framework metrics summary (time in steps vs others;
forward, backward, optimizer and dataloader wait within the steps; CPU vs GPU operator time and the
most expensive operators from the detailed torch.profiler traces), step durations with their outliers
per instance, and data loading (parallel loader processes against the cores, loading times, wait
against compute per step).

The rules are those of the job: each profiler rule it configures, with its own parameters, and the
rules its ProfilerReport runs with ProfilerReport's; a job without a ProfilerReport rule gets the
other built-in rules at their defaults besides its own. Charts draw the limits these rules use, and
every share shown is the one the rule computed (shipyard.rules.profiler.base.percentages: each set
adds up to 100). `shipyard report JOB` writes it into the job's directory; the rules are evaluated over
the data as it is now (the job may still run)."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from jinja2 import ChoiceLoader, Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from shipyard.contract.profiler import DATALOADER_ITER, DATALOADER_WORKER
from shipyard.rules.profiler import charts, profiler_report
from shipyard.rules.profiler.base import Finding, percentages
from shipyard.rules.profiler.data import ProfilerData, ProfilerReader
from shipyard.rules.profiler.dataloader import node_stats
from shipyard.rules.profiler.overall_framework_metrics import NO_TRACES, PHASES
from shipyard.rules.profiler.overall_system_usage import UNITS
from shipyard.rules.profiler.step_outlier import MIN_STEPS
from shipyard.spec.rule_parameters import parse_parameters
from shipyard.spec.rules import rule_module


def page(name: str, package: str = "shipyard.rules.profiler"):
    """A report's template, from `package`'s templates, with the macros and style the reports share
    (templates/macros.html, style.css here). Autoescaped: text from a job is always shown as text."""
    loader = ChoiceLoader([PackageLoader(package), PackageLoader("shipyard.rules.profiler")])
    return Environment(loader=loader, autoescape=True, undefined=StrictUndefined, trim_blocks=True,
                       lstrip_blocks=True).get_template(name)


PAGE = page("report.html")
ALL_NODES = "all nodes"
UTILISATION = (("CPU", "cpu", "CPUUtilization"), ("CPU memory", "memory", ""), ("GPU", "gpu", "GPUUtilization"),
               ("GPU memory", "gpu", "GPUMemoryUtilization"))


@dataclass
class Evaluation:
    """One profiler rule as the report evaluates it, with the settings in force for it."""

    title: str  # the job's name for the rule; a sub-rule of ProfilerReport's: "<ProfilerReport's name>/<rule>"
    rule: str  # the built-in rule
    params: dict  # every parameter's value
    source: str  # where the rule and its settings come from, in words
    given: set[str] = field(default_factory=set)  # the parameters set on the job (the others are defaults)
    own: bool = False  # a rule of the job itself, whose watcher gives it a status
    finding: Finding | None = None


def evaluations(spec, data: ProfilerData, now: float, final: bool) -> list[Evaluation]:
    """The job's own built-in profiler rules, and the rules its ProfilerReport runs (the defaults of those
    it does not configure itself when it has no ProfilerReport rule), each evaluated over `data`."""
    rules = [r for r in spec.rules if r.kind == "profiler" and r.rule != "custom"]
    report = next((r for r in rules if r.rule == "ProfilerReport"), None)
    out = [Evaluation(r.name, r.rule, parse_parameters(r.rule, rule_module("profiler", r.rule).PARAMETERS,
                                                       r.parameters), f"job rule {r.name}", set(r.parameters),
                      own=True) for r in rules if r is not report]
    given = report.parameters if report else {}
    params = parse_parameters("ProfilerReport", profiler_report.PARAMETERS, given)
    configured = {e.rule for e in out}
    for rule in profiler_report.SUB_RULES:
        if report is not None:
            out.append(Evaluation(f"{report.name}/{rule}", rule, profiler_report.sub_parameters(rule, params),
                                  f"in job rule {report.name}",
                                  {k.removeprefix(f"{rule}_") for k in given if k.startswith(f"{rule}_")}))
        elif rule not in configured:
            out.append(Evaluation(rule, rule, profiler_report.sub_parameters(rule, params),
                                  "default (the job has no ProfilerReport rule)"))
    for e in out:
        e.finding = rule_module("profiler", e.rule).evaluate(data, e.params, now, final)
    return out


def _first(found: list[Evaluation], rule: str) -> Finding:
    """The finding of one of the rules of that kind: for the statistics, which do not depend on parameters."""
    return next(e.finding for e in found if e.rule == rule)


def render(spec, record, data: ProfilerData, statuses: list[dict]) -> str:
    found = evaluations(spec, data, time.time(), final=record.terminal)
    framework = _first(found, "OverallFrameworkMetrics").stats
    return PAGE.render(
        job=spec.job_name, status=record.status, generated=time.strftime("%Y-%m-%d %H:%M:%S"),
        summary=_summary(record, data, spec), rules=_rules(found, statuses),
        job_rules=_job_rules(spec, found, statuses),
        nodes=_system(data, _first(found, "OverallSystemUsage").stats, _group_of(spec)),
        framework=_framework(data, framework), operators=_operators(data, framework), no_traces=NO_TRACES,
        steps=_steps(data, [e for e in found if e.rule == "StepOutlier"]), dataloader=_dataloader(data))


def _group_of(spec) -> dict[str, str]:
    """A heterogeneous job's host -> 'group (instance type)'; {} for one group."""
    if not spec.instance_groups:
        return {}
    return {host: f"{g['instance_group_name']} ({g['instance_type']})" for g in spec.groups for host in g["hosts"]}


def _summary(record, data: ProfilerData, spec) -> list[tuple[str, str]]:
    """The job's times; once it ended, its duration split into initialization (to the first step), the
    training loop (to the end of the last step) and finalization, which add up to the whole."""
    start, end = record.training_start_time or record.creation_time, record.training_end_time
    rows = [("start", _when(start)), ("end", _when(end) if end else "still running"),
            ("nodes", ", ".join(data.nodes) or "none yet"), ("steps recorded", str(len(data.steps)))]
    if spec.instance_groups:
        rows.insert(3, ("instance groups", "; ".join(
            f"{g['instance_group_name']}: {', '.join(g['hosts'])} ({g['instance_type']})" for g in spec.groups)))
    if not data.steps:
        return rows
    first, last = min(s.start for s in data.steps), max(s.start + s.duration for s in data.steps)
    rows += [("training loop start", _when(first)), ("training loop end", _when(last))]
    if end and start:
        first = min(max(first, start), end)  # the recorded steps' times, within the job's
        last = min(max(last, first), end)
        parts = {"initialization": first - start, "training loop": last - first, "finalization": end - last}
        shares = percentages(parts)
        rows += [*((f"{part} (s)", f"{seconds:.1f}") for part, seconds in parts.items()),
                 ("job duration (s)", f"{end - start:.1f}"),
                 (" / ".join(parts), " / ".join(f"{shares.get(p, 0):.0f}%" for p in parts))]
    return rows


def _rules(found: list[Evaluation], statuses: list[dict]) -> list[dict]:
    """Every rule evaluated, those that found most first. A job's own rule shows the status its watcher
    gave it (IssuesFound stays, as on SageMaker); the others the report's evaluation."""
    stored = {s["rule"]: s["status"] for s in statuses}
    rows = []
    for e in sorted(found, key=lambda e: -e.finding.violations):
        module = rule_module("profiler", e.rule)
        rows.append({"title": e.title, "rule": e.rule, "description": module.DESCRIPTION,
                     "recommendation": module.RECOMMENDATION, "finding": e.finding,
                     "status": stored[e.title] if e.own and e.title in stored else
                     ("IssuesFound" if e.finding.triggered else "NoIssuesFound"),
                     "source": e.source, "params": [(k, _value(v), k in e.given) for k, v in e.params.items()
                                                    if k != "scan_interval_us"]})
    return rows


def _value(value) -> str:
    """A parameter's value as the user would write it: 5 rather than 5.0, "unset" for None."""
    if value is None:
        return "unset"
    return f"{value:g}" if isinstance(value, float) else ", ".join(value) if isinstance(value, tuple) else str(value)


def _job_rules(spec, found: list[Evaluation], statuses: list[dict]) -> list[dict]:
    """The job's profiler rules not in the rules table (ProfilerReport, custom rules) and statuses of rules
    it no longer has (removed by disable_profiling()), with the parameters set on the job."""
    shown = {e.title for e in found if e.own}
    stored = {s["rule"]: s for s in statuses}
    rules = {r.name: r for r in spec.rules if r.kind == "profiler" and r.name not in shown}
    names = list(rules) + [name for name in stored if name not in rules and name not in shown]
    return [{"name": name, "rule": rules[name].rule if name in rules else "",
             "status": stored[name]["status"] if name in stored else "Pending",
             "details": (stored[name]["details"] or "") if name in stored else "",
             "params": sorted(rules[name].parameters.items()) if name in rules else []} for name in names]


def _system(data: ProfilerData, usage: dict, groups: dict[str, str]) -> list[dict]:
    out = []
    for node in data.nodes:
        series: dict[str, list[tuple[float, float]]] = {}
        for _, ts, records in data.snapshots(node):  # CPU and GPU: the mean over the cores, the GPUs
            for label, type_, dimension in UTILISATION:
                values = [r["Value"] for r in records if r["Type"] == type_ and r["Dimension"] == dimension]
                if values:
                    series.setdefault(label, []).append((ts, sum(values) / len(values)))
        out.append({"name": node, "group": groups.get(node), "chart": Markup(charts.line_chart(
            f"{node} utilisation", series, "utilisation (%)", y_max=100)),
            "usage": [(metric, UNITS[metric], *(f"{s[k]:.{1 if UNITS[metric] == '%' else 2}f}"
                                                 for k in ("max", "p99", "p95", "p50", "min")))
                      for metric, s in usage.get(node, {}).items() if s]})
    return out


def _with_all(stats: dict, nodes: list[str], key) -> dict[str, dict]:
    """Per node, and over all nodes when there are several (the numbers the rule's finding gives)."""
    rows = {node: key(stats[node]) for node in nodes}
    if len(nodes) > 1:
        rows[ALL_NODES] = key(stats["all"])
    return rows


def _framework(data: ProfilerData, stats: dict) -> dict | None:
    """Where the training processes' time went, per node, from OverallFrameworkMetrics."""
    nodes = [n for n in data.nodes if n in stats and stats[n]["step_time"]]
    if not nodes:
        return None
    rows = [(node, *(f"{stats[node][k]:.2f}" for k in ("step_time", "others")),
             *(f"{stats[node]['phases'].get(p, 0.0):.2f}" for p in PHASES),
             *(f"{stats[node][k]:.2f}" for k in ("dataloader_wait", "dataloader_workers"))) for node in nodes]
    parts = _with_all(stats, nodes, lambda m: m["step_parts"])
    return {"header": ["node", "steps (s)", "others (s)", *(f"{p} (s)" for p in PHASES), "dataloader wait (s)",
                       "dataloader workers (s)"], "rows": rows,
            "modes": Markup(charts.share_bars("steps vs others", _with_all(stats, nodes, lambda m: m["modes"]))),
            "parts": Markup(charts.share_bars("step time", parts)) if any(parts.values()) else None}


def _operators(data: ProfilerData, stats: dict) -> dict | None:
    """CPU vs GPU operator time per node and each node's most expensive operators, from the detailed traces."""
    nodes = [n for n in data.nodes if n in stats and stats[n]["operators"]]
    if not nodes:
        return None
    return {"chart": Markup(charts.share_bars("CPU vs GPU operators",
                                              _with_all(stats, nodes, lambda m: m["operators"]["shares"]))),
            "tables": [{"node": node, "device": device, "traces": stats[node]["operators"]["traces"],
                        "rows": [(op["name"], str(op["calls"]), f"{op['self_ms']:.3f}", f"{op['share']:.1f}")
                                 for op in stats[node]["operators"]["top"][device]]}
                       for node in nodes for device in ("CPU", "GPU") if stats[node]["operators"]["top"][device]]}


def _steps(data: ProfilerData, outliers: list[Evaluation]) -> list[dict]:
    """Per node and mode: the durations with the limit of each StepOutlier rule that judged them."""
    out = []
    for node in data.nodes:
        for mode in sorted({s.mode for s in data.step_durations(node)}):
            steps = data.step_durations(node, mode)
            judged = [(e, e.finding.stats[node][mode]) for e in outliers if mode in e.finding.stats.get(node, {})]
            limits = [(f"{e.title}: mean + {e.params['stddev']:g} std = {found['limit']:.3g} s", found["limit"])
                      for e, found in judged]
            lowest = min((limit for _, limit in limits), default=None)
            normal = [s.duration for s in steps if lowest is None or s.duration <= lowest]
            out.append({"node": node, "mode": mode, "notes": [_outliers(e, found) for e, found in judged] or [
                f"No outlier limit: StepOutlier judges a node's {mode} steps once there are more than {MIN_STEPS}."],
                "chart": Markup(charts.step_chart(f"{node} step durations ({mode})",
                                                  [(s.step, s.duration) for s in steps], limits)),
                "histogram": Markup(charts.histogram(f"{node} step duration histogram ({mode})", normal))})
    return out


def _outliers(rule: Evaluation, found: dict) -> str:
    above = f"above {found['limit']:.4f}s (mean {found['mean']:.4f}s)"
    listed = ", ".join(f"step {s} ({d:.3f}s)" for s, d in found["outliers"][:20])
    return f"{rule.title} (stddev {rule.params['stddev']:g}): " + (
        f"{len(found['outliers'])} outlier{'s' * (len(found['outliers']) > 1)} {above}: {listed}"
        if found["outliers"] else f"no outliers {above}")


def _dataloader(data: ProfilerData) -> dict | None:
    """Per node: parallel loader processes against the cores, loading times, and the wait per step."""
    loaders = {node: node_stats(data, node) for node in data.nodes}
    waiting = [n for n in data.nodes if any(s.dataloader for s in data.step_durations(n))]
    if not waiting and not any(loaders.values()):
        return None
    rows, out_charts = [], []
    for node in data.nodes:
        stats, steps = loaders[node] or {}, data.step_durations(node)
        total, wait = sum(s.duration for s in steps), sum(s.dataloader for s in steps)
        times = stats.get("dataloading_time", {})
        rows.append((node, *(str(stats.get(k, "")) for k in ("cores", "dataloaders", "processes", "num_workers",
                                                              "pin_memory")),
                     *(f"{times[q] * 1000:.1f}" if times else "" for q in ("p25", "p50", "p95")),
                     f"{100 * wait / total:.1f}" if total else ""))
    for node in waiting:
        per_step: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for s in data.step_durations(node, "TRAIN"):
            per_step[s.step].append((s.dataloader, max(s.duration - s.dataloader, 0.0)))
        mean = {step: [sum(v) / len(v) for v in zip(*pairs)] for step, pairs in sorted(per_step.items())}
        caption = f"{node} dataloader wait and compute per step (mean over ranks)"
        out_charts.append((caption, Markup(charts.line_chart(
            caption, {"dataloader wait": [(step, w) for step, (w, _) in mean.items()],
                      "compute": [(step, c) for step, (_, c) in mean.items()]},
            "seconds", x_label="step", from_zero=False, whole_x=True))))
    for node in data.nodes:
        fetches = [e.duration for e in data.framework_events(node, (DATALOADER_WORKER,))] or \
                  [e.duration for e in data.framework_events(node, (DATALOADER_ITER,))]
        if fetches:
            caption = f"{node} dataloading time histogram"
            out_charts.append((caption, Markup(charts.histogram(caption, fetches, x_label="seconds per batch",
                                                                y_label="batches"))))
    return {"rows": rows, "charts": out_charts}


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
        raise ValidationError("job", job, "the job ran without profiling; give profiler_config=ProfilerConfig() to "
                              "profile it")
    path = store.job_dir(job) / "profiler-report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(spec, record, data, store.rule_statuses(job, "profiler")))
    return path
