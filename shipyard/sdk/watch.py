"""Following a job as a person expects of a modern tool: every host's log lines as they are written,
prefixed by host, status changes as they happen, download and upload progress, and at the end the
outcome (on failure, the reason and the last lines of the failing host)."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from shipyard.control.describe import OWN
from shipyard.runtime.tail import FileTail

POLL_SECONDS = 0.1
HOST_STYLES = ("cyan", "magenta", "green", "yellow", "blue", "red")


class LogTail(FileTail):
    """One host's log file, read as it grows."""

    def __init__(self, host: str, path: Path) -> None:
        super().__init__(path)
        self.host = host


def _style(host: str) -> str:
    digits = "".join(c for c in host if c.isdigit()) or "0"
    return HOST_STYLES[(int(digits) - 1) % len(HOST_STYLES)]


def _stamp(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def tails(store, name: str) -> list[LogTail]:
    hosts = store.get_job(name).spec.hosts
    return [LogTail(host, store.log_path(name, host)) for host in hosts]


def log_console(**kwargs) -> Console:
    """Log lines are printed as they are: no emoji codes, no markup guessing, no wrapping."""
    return Console(soft_wrap=True, emoji=False, highlight=False, **kwargs)


def print_log_lines(console: Console, tail: LogTail, final: bool = False) -> None:
    style = _style(tail.host)
    for line in tail.read(final):
        console.print(f"[{style}]{tail.host}[/{style}] | {escape(line)}", highlight=False, soft_wrap=True)


def print_logs(store, name: str, console: Console | None = None) -> None:
    console = console or log_console()
    for tail in tails(store, name):
        print_log_lines(console, tail, final=True)


def watch(store, name: str, show_logs: bool = True, console: Console | None = None) -> dict:
    from shipyard.control.describe import describe_record
    from shipyard.control.reconcile import reconcile

    console = console or log_console()
    log_tails = tails(store, name)
    seen_transitions, seen_event, shown = 0, 0, None
    last_progress: dict[str, float] = {}
    while True:
        record = reconcile(store, name)
        # Status changes and events interleaved in the order they happened.
        fresh = record.transitions[seen_transitions:]
        if not fresh and record.transitions and record.transitions[-1].message != shown:
            fresh = record.transitions[-1:]  # news of the same step (its place in the capacity queue)
        updates = [(t.start_time, 0, t) for t in fresh]
        seen_transitions = len(record.transitions)
        shown = record.transitions[-1].message if record.transitions else None
        events = store.events(name, after=seen_event)
        if events:
            seen_event = events[-1]["id"]
        updates += [(e["ts"], 1, e) for e in events]
        for _, is_event, item in sorted(updates, key=lambda u: (u[0], u[1])):
            if is_event:
                _print_event(console, item, last_progress)
            else:
                message = f" - {item.message}" if item.message else ""
                console.print(f"[bold]{_stamp(item.start_time)} {item.status}[/bold]{escape(message)}")
        if show_logs:
            for tail in log_tails:
                print_log_lines(console, tail, final=record.terminal)
        if record.terminal:
            break
        time.sleep(POLL_SECONDS)
    description = describe_record(store, store.get_job(name))
    _print_outcome(console, store, description)
    return description


def _print_event(console: Console, event: dict, last_progress: dict[str, float]) -> None:
    kind, message = event["kind"], event["message"]
    if kind == "progress":
        key = f"{event['host']} {message.split(' ')[1] if ' ' in message else ''}"
        done, _, total = message.rsplit(" ", 1)[-1].partition("/")
        if done != total and event["ts"] - last_progress.get(key, 0) < 2:
            return  # progress is shown every couple of seconds and once when complete
        last_progress[key] = event["ts"]
        console.print(f"[dim]{event['host']} {escape(message)} bytes[/dim]", highlight=False)
    elif kind == "upload":
        console.print(f"[dim]uploaded {escape(message)}[/dim]", highlight=False)
    elif kind in ("checkpoint", "info") and message.startswith(("restored", "checkpoint", "expected cost")):
        console.print(f"[dim]{event['host'] or ''} {escape(message)}[/dim]", highlight=False)
    elif kind == "warning":
        console.print(f"[yellow]warning:[/yellow] {escape(message)}", highlight=False)


def _print_outcome(console: Console, store, description: dict) -> None:
    status = description["TrainingJobStatus"]
    seconds = description.get("TrainingTimeInSeconds")
    resources = description["ResourceConfig"]
    count = resources.get("InstanceCount") or sum(g["InstanceCount"] for g in resources["InstanceGroups"])
    if seconds is not None:
        # Per instance times the instances, as SageMaker's SDK prints them; describe() has the per-instance figure.
        for label, each in (("Training", seconds), ("Billable", description["BillableTimeInSeconds"])):
            console.print(f"{label} seconds: {each * count}" + (f" ({each} s x {count} instances)" if count > 1 else ""))
        own = description.get(OWN, {})
        if "ManagedSpotTrainingSavings" in own:
            console.print(f"Managed Spot Training savings: {own['ManagedSpotTrainingSavings']}%")
        cost = own.get("Cost", {})
        if cost.get("OnDemandAmount"):
            console.print(f"Cost: ${cost['Amount']:.4f} (on demand: ${cost['OnDemandAmount']:.4f})")
    _print_rules(console, description)
    if status == "Completed":
        console.print(f"[green]Completed[/green]: model at {description['ModelArtifacts']['S3ModelArtifacts']}")
    elif status == "Failed":
        reason = description.get("FailureReason", "")
        console.print(f"[red]Failed[/red]: {escape(reason)}", highlight=False)
        host = reason.split(":", 2)[1].strip() if reason.count(":") >= 2 else None
        _print_last_lines(console, store, description["TrainingJobName"], host)
    else:
        console.print(f"[yellow]{status}[/yellow] ({description['SecondaryStatus']})")


RULE_STYLES = {"IssuesFound": "red", "NoIssuesFound": "green", "Error": "red", "Stopped": "yellow"}


def _print_rules(console: Console, description: dict) -> None:
    """Each rule's final status and finding, debugger rules then profiler rules, as describe() has them."""
    statuses = description.get("DebugRuleEvaluationStatuses", []) + description.get("ProfilerRuleEvaluationStatuses", [])
    if not statuses:
        return
    console.print("Rules:")
    width = max(len(s["RuleConfigurationName"]) for s in statuses)
    for s in statuses:
        status = s["RuleEvaluationStatus"]
        style = RULE_STYLES.get(status, "")
        details = s.get("StatusDetails") or ""
        # An Error's details are a traceback: its last line says what went wrong.
        details = details.strip().splitlines()[-1] if status == "Error" and details.strip() else details
        console.print(f"  {escape(s['RuleConfigurationName']).ljust(width)}  [{style}]{status}[/{style}]"
                      + (f"  {escape(details)}" if status != "NoIssuesFound" and details else ""), highlight=False)


def _print_last_lines(console: Console, store, name: str, host: str | None, count: int = 15) -> None:
    hosts = store.get_job(name).spec.hosts
    if host not in hosts:
        return
    path = store.log_path(name, host)
    if not path.exists():
        return
    lines = path.read_text(errors="replace").splitlines()[-count:]
    console.print(f"last lines of {host}:")
    for line in lines:
        console.print(f"  {escape(line)}", highlight=False)
