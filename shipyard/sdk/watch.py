"""Following a job as a person expects of a modern tool: every host's log lines as they are written,
labelled by host (`algo-1 | ...`; a host of several processes labels each one's lines in its log, `algo-1[1]
| ...`, and those are shown as they are), status changes as they happen, transfers' progress (channels,
code, checkpoints, uploads: rich's progress bars on a terminal, a readable line every few seconds
elsewhere), and at the end the outcome (on failure, the reason and the last lines of the failing host)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from shipyard.control.describe import OWN
from shipyard.runtime.launchers.base import LABEL_SEPARATOR, split_rank_label
from shipyard.runtime.tail import FileTail
from shipyard.storage.transfer import PROGRESS_LINE, progress_line

POLL_SECONDS = 0.1
HOST_STYLES = ("cyan", "magenta", "green", "yellow", "blue", "red")
# Where no bar can show a transfer, its line at most this often, and once it is done.
LINE_SECONDS = 5.0


class LogTail(FileTail):
    """One host's log file, read as it grows."""

    def __init__(self, host: str, path: Path) -> None:
        super().__init__(path)
        self.host = host


def _style(host: str) -> str:
    digits = "".join(c for c in host if c.isdigit()) or "0"
    return HOST_STYLES[(int(digits) - 1) % len(HOST_STYLES)]


def _label(host: str, label: str | None = None) -> str:
    """The markup of a line's label: the host's, or one of its processes' (`algo-1[1]`), in the host's colour."""
    style = _style(host)
    return f"[{style}]{escape(label or host)}[/{style}]"


def _stamp(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def tails(store, name: str) -> list[LogTail]:
    hosts = store.get_job(name).spec.hosts
    return [LogTail(host, store.log_path(name, host)) for host in hosts]


def log_console(**kwargs) -> Console:
    """Log lines are printed as they are: no emoji codes, no markup guessing, no wrapping."""
    return Console(soft_wrap=True, emoji=False, highlight=False, **kwargs)


def print_log_lines(console: Console, tail: LogTail, final: bool = False, transfers_shown: bool = False) -> None:
    """The host's new lines, labelled. `transfers_shown`: leave out the agent's lines on transfers' progress
    (a Transfers on the same console shows them)."""
    for line in tail.read(final):
        if transfers_shown and " shipyard-agent " in line and PROGRESS_LINE.search(line):
            continue
        label, text = split_rank_label(tail.host, line)
        console.print(f"{_label(tail.host, label)}{LABEL_SEPARATOR}{escape(text)}", highlight=False, soft_wrap=True)


def print_logs(store, name: str, console: Console | None = None) -> None:
    console = console or log_console()
    for tail in tails(store, name):
        print_log_lines(console, tail, final=True)


@dataclass
class _Transfer:
    started: float
    shown: float            # when its line was last printed (or it started)
    done: int = 0
    bar: TaskID | None = None


class Transfers:
    """Transfers' progress on a console, each known by its host (None: this process's) and what it is
    (`download train`). On a terminal: a rich progress bar each, below the lines printed (which go above
    them); once one is done its bar goes and its line is printed. Elsewhere: its line once LINE_SECONDS have
    passed since the last, and once it is done. The line is storage.transfer.progress_line, as in the host
    logs. Each report carries its time, so rates are the transfer's own however late it is read."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.running: dict[tuple[str | None, str], _Transfer] = {}
        self.bars: Progress | None = None
        self.now = 0.0   # the time of the report being shown: the bars' clock

    def __enter__(self) -> Transfers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def reporter(self, what: str) -> Callable[[int, int], None]:
        """A `progress(done, total)` for a transfer this process makes."""
        return lambda done, total: self.update(None, what, done, total, time.time())

    def update(self, host: str | None, what: str, done: int, total: int, ts: float) -> None:
        key = (host, what)
        transfer = self.running.get(key)
        if transfer is None or done < transfer.done:   # new, or begun again (another attempt)
            self._forget(key)
            transfer = self.running[key] = _Transfer(started=ts, shown=ts)
        transfer.done = done
        if done >= total:
            self._forget(key)
            self._say(host, progress_line(what, done, total, ts - transfer.started))
        elif self.console.is_terminal:
            self._bar(transfer, host, what, done, total, ts)
        elif ts - transfer.shown >= LINE_SECONDS:
            transfer.shown = ts
            self._say(host, progress_line(what, done, total, ts - transfer.started))

    def _bar(self, transfer: _Transfer, host: str | None, what: str, done: int, total: int, ts: float) -> None:
        if self.bars is None:
            self.bars = Progress(
                TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                TimeRemainingColumn(), console=self.console, transient=True, get_time=lambda: self.now)
            self.bars.start()
        self.now = ts
        if transfer.bar is None:
            described = f"{_label(host)} {escape(what)}" if host else escape(what)
            transfer.bar = self.bars.add_task(described, total=total, completed=done)
        else:
            self.bars.update(transfer.bar, total=total, completed=done)

    def _say(self, host: str | None, line: str) -> None:
        label = f"{_label(host)}{LABEL_SEPARATOR}" if host else ""
        self.console.print(f"{label}[dim]{escape(line)}[/dim]", highlight=False)

    def _forget(self, key: tuple[str | None, str]) -> None:
        transfer = self.running.pop(key, None)
        if transfer is not None and transfer.bar is not None and self.bars is not None:
            self.bars.remove_task(transfer.bar)
            if not self.bars.task_ids:
                self.close()

    def close(self) -> None:
        """Take the bars away (the lines printed stay)."""
        if self.bars is not None:
            self.bars.stop()
            self.bars = None


def watch(store, name: str, show_logs: bool = True, console: Console | None = None) -> dict:
    from shipyard.control.describe import describe_record
    from shipyard.control.reconcile import reconcile

    console = console or log_console()
    log_tails = tails(store, name)
    seen_transitions, seen_event, shown = 0, 0, None
    with Transfers(console) as transfers:
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
                    _print_event(console, item, transfers)
                else:
                    message = f" - {item.message}" if item.message else ""
                    console.print(f"[bold]{_stamp(item.start_time)} {item.status}[/bold]{escape(message)}")
            if show_logs:
                for tail in log_tails:
                    print_log_lines(console, tail, final=record.terminal, transfers_shown=True)
            if record.terminal:
                break
            time.sleep(POLL_SECONDS)
    description = describe_record(store, store.get_job(name))
    _print_outcome(console, store, description)
    return description


def _print_event(console: Console, event: dict, transfers: Transfers) -> None:
    kind, message = event["kind"], event["message"]
    if kind == "progress":   # `download train 120000000/300000000` (control/controller.py)
        what, _, counts = message.rpartition(" ")
        done, _, total = counts.partition("/")
        if done.isdigit() and total.isdigit():
            transfers.update(event["host"], " ".join(what.split()), int(done), int(total), event["ts"])
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
