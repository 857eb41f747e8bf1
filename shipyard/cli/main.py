"""`shipyard`: submit training jobs and look after them.

    shipyard run train.py --instance-count 2 --distribution torch_distributed --hp epochs=3
    shipyard run job.yaml --hp lr=0.1        # options override the file
    shipyard jobs list | describe | wait | stop | logs
    shipyard tune tuning.yaml                 # hyperparameter tuning (docs/tuning.md)
    shipyard tuning list | describe | jobs | stop | wait
    shipyard plan --deadline 8h --baseline 24h@ml.p3.2xlarge   # strategy, type, count, spot (docs/planner.md)
    shipyard costs --by day | prefix | tag

Errors shipyard raises on purpose print as `error: ...` (exit 2; 1 when a job ended other than
Completed), never as a traceback. Everything heavy is imported inside the commands."""

from __future__ import annotations

import json
import sys
import warnings

import click

from shipyard.cli.listing import (
    complete_jobs,
    complete_pools,
    echo_json,
    fitting,
    output_option,
    table,
    table_console,
)
from shipyard.errors import ShipyardError, UnexpectedStatusError
from shipyard.spec.statuses import STATUSES, status_named

STATUS_STYLES = {"Completed": "green", "Failed": "red", "Stopped": "yellow", "Stopping": "yellow",
                 "InProgress": "cyan"}
POLL_SECONDS = 0.25


def _stderr():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def _error(message: str) -> None:
    from rich.markup import escape

    _stderr().print(f"[bold red]error:[/bold red] {escape(message)}")


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    from rich.markup import escape

    _stderr().print(f"[yellow]warning:[/yellow] {escape(str(message))}")


class ShipyardGroup(click.Group):
    """Turns shipyard's errors into `error: ...` and an exit code, and warnings into `warning: ...`."""

    def invoke(self, ctx: click.Context):
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            try:
                return super().invoke(ctx)
            except UnexpectedStatusError as exc:
                _error(str(exc))
                ctx.exit(1)
            except ShipyardError as exc:
                _error(_in_flags(str(exc)))
                ctx.exit(2)


def _in_flags(message: str) -> str:
    """An argument named in an error's fix as the SDK spells it, as `run`'s option that sets it."""
    import re

    field, sep, fix = message.partition(": ")
    for option in run.params:
        if isinstance(option, click.Option) and option.name and option.opts[0] == "--" + option.name.replace("_", "-"):
            name, flag = option.name, option.opts[0]
            fix = re.sub(rf"\b{name}=True\b", flag, fix)
            fix = re.sub(rf"(?<!['\w]){name}\b(?![='(-])", f"{name} ({flag})", fix, count=1)  # not 'quoted'
    return field + sep + fix


def _store():
    from shipyard.store import Store

    return Store()


def _run_where_it_lives(job: str) -> None:
    """A job this machine's store does not have but the named Ray cluster's home does (its controller lives
    there: control/cluster_home.py): the command runs there, its output shown here, its exit code this one's."""
    from shipyard.control import cluster_home as home

    if home.holds(_store(), job):
        ctx = click.get_current_context()
        ctx.exit(home.run(_command_line(ctx)))


def _command_line(ctx: click.Context) -> list[str]:
    """The command and its parameters as they were given (long option names)."""
    argv = [ctx.info_name]
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if isinstance(param, click.Argument):
            argv.append(str(value))
            continue
        option = max(param.opts, key=len)
        if param.is_flag:
            argv += [option] if value else []
        elif param.multiple:
            argv += [part for item in value for part in (option, str(item))]
        elif value is not None:
            argv += [option, str(value)]
    return argv


@click.group(cls=ShipyardGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="shipyard", prog_name="shipyard")
def cli() -> None:
    """Distributed training jobs with the SageMaker Training contract, on machines you own.

    Jobs live under $SHIPYARD_HOME (default ~/.shipyard)."""


# -- run --------------------------------------------------------------------------------------------
@cli.command(epilog="""\b
Examples:
  shipyard run train.py --source-dir src --instance-count 2 --distribution torch_distributed \\
      --hp epochs=3 --channel train=s3://bucket/train --metric loss='loss=([0-9.]+)'
  shipyard run job.yaml --hp lr=0.1 --detach
  shipyard run train.py --instance-count 2 --dry-run --json""")
@click.argument("target", metavar="ENTRY_POINT|JOB.yaml")
@click.option("--source-dir", help="Directory packed as the job's code; ENTRY_POINT is inside it.")
@click.option("--instance-count", type=int, help="Number of instances (default 1).")
@click.option("--instance-type", help="Instance type from the catalog (default local).")
@click.option("--instance-group", "instance_groups", multiple=True, metavar="NAME=TYPE:COUNT",
              help="An instance group of a heterogeneous job, instead of --instance-type/--instance-count.")
@click.option("--distribution-group", metavar="NAME", help="The instance group that runs --distribution.")
@click.option("--distribution", metavar="STRATEGY", help="torch_distributed, pytorchddp, ...")
@click.option("--processes-per-host", type=int, help="Processes per instance for the distribution.")
@click.option("--hp", "--hyperparameter", "hyperparameters", multiple=True, metavar="KEY=VALUE",
              help="Hyperparameter; VALUE is JSON when it parses (3, 0.1, true, [1,2]), else a string.")
@click.option("--channel", "channels", multiple=True, metavar="NAME=URI[:ShardedByS3Key]",
              help="Input channel (s3://, file:// or a local path).")
@click.option("--sharded", multiple=True, metavar="NAME", help="Shard channel NAME across instances.")
@click.option("--input-mode", metavar="MODE", help="How channels reach the script: File (default, copied "
              "first), FastFile (mounted, read on demand) or Pipe (streamed into FIFOs).")
@click.option("--output-path", help="Where model.tar.gz and output.tar.gz go.")
@click.option("--metric", "metrics", multiple=True, metavar="NAME=REGEX",
              help="Metric scraped from the logs: the regex's first group.")
@click.option("--env", "environment", multiple=True, metavar="KEY=VALUE", help="Environment variable.")
@click.option("--max-run", type=int, help="Seconds before the job is stopped (default 86400).")
@click.option("--job-name", help="Job name (default: BASE-JOB-NAME plus a timestamp).")
@click.option("--base-job-name")
@click.option("--framework", help="Estimator class, a name in the frameworks registry: pytorch (default; none "
              "for a built-in algorithm's image_uri), tensorflow, sklearn, xgboost, huggingface, none (the generic "
              "Estimator).")
@click.option("--oversubscribe/--no-oversubscribe", default=None,
              help="Let instances share this machine's CPUs and memory.")
@click.option("--stop-grace-seconds", type=float, help="SIGTERM to SIGKILL on stop (default 120).")
@click.option("--use-spot-instances/--no-use-spot-instances", default=None,
              help="Managed spot training: interruptions restart the job from its checkpoints.")
@click.option("--max-wait", type=int, help="Spot: seconds of waiting for capacity plus running.")
@click.option("--max-cost", type=float, metavar="USD",
              help="A budget: the job is stopped before it would cost more (docs/planner.md).")
@click.option("--checkpoint-s3-uri", help="Where /opt/ml/checkpoints is restored from and synced to.")
@click.option("--spot-without-checkpoints/--no-spot-without-checkpoints", default=None,
              help="Spot without --checkpoint-s3-uri: accept restarting from scratch after interruptions.")
@click.option("--max-retry-attempts", type=int, help="Restarts after platform failures (not script errors).")
@click.option("--backend", help="Where instances run: local (default, or SHIPYARD_BACKEND) or ray (docs/ray.md).")
@click.option("--controller", help="Where the job's controller runs: local (default) or cluster (with --backend "
              "ray: on the Ray cluster's head, so this machine may go away; docs/ray.md).")
@click.option("--follow-symlinks/--no-follow-symlinks", default=None,
              help="Upload what links in the source dir that point outside it point to (default: refuse them).")
@click.option("--keep-alive", "keep_alive_period_in_seconds", type=int, metavar="SECONDS",
              help="Keep the instances warm this long after the job for the next matching job (0-21600).")
@click.option("--detach", is_flag=True, help="Print the job name and return; the job keeps running.")
@click.option("--dry-run", is_flag=True, help="Print what each instance would run; start nothing.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: print the plan as JSON.")
@click.option("--no-logs", is_flag=True, help="While waiting, show status changes only.")
@click.pass_context
def run(ctx: click.Context, target: str, detach: bool, dry_run: bool, as_json: bool, no_logs: bool,
        **options) -> None:
    """Run ENTRY_POINT (a script) or JOB.yaml as a training job and follow it."""
    from shipyard.cli import jobfile

    if as_json and not dry_run:
        raise click.UsageError("--json goes with --dry-run")
    request = jobfile.build_request(target, jobfile.RunOptions(**options))
    estimator = jobfile.make_estimator(request)
    inputs = jobfile.fit_inputs(request)
    if dry_run:
        _print_plan(estimator.plan(inputs, job_name=request.job_name), estimator.expected_cost(), as_json)
        return
    # fit(wait=False) then wait, rather than fit(wait=True): the job's name is shown before its logs.
    estimator.fit(inputs, wait=False, job_name=request.job_name)
    job = estimator.latest_training_job
    if detach:
        click.echo(job.name)
        return
    _stderr().print(f"[bold]{job.name}[/bold]  (detach with Ctrl-C; `shipyard stop {job.name}` stops it)")
    try:
        description = _watch(job.store, job.name, show_logs=not no_logs)
    except KeyboardInterrupt:
        _stderr().print(f"job {job.name} keeps running: `shipyard wait {job.name}`, `shipyard stop {job.name}`")
        ctx.exit(130)
    # As TrainingJob.wait(): Failed is an error, Stopped a warning; either way not a success.
    status = description["TrainingJobStatus"]
    if status == "Failed":
        raise UnexpectedStatusError(job.name, status, description.get("FailureReason"))
    if status != "Completed":
        warnings.warn(f"job {job.name} was stopped ({description['SecondaryStatus']})", stacklevel=1)
    ctx.exit(0 if status == "Completed" else 1)


def _watch(store, name: str, show_logs: bool) -> dict:
    from shipyard.sdk.watch import watch

    return watch(store, name, show_logs=show_logs)


def plan_json(launches: list) -> dict:
    return {
        "job_name": launches[0].env.get("TRAINING_JOB_NAME") if launches else None,
        "instances": [
            {
                "host": launch.instance.host,
                "launcher": launch.launcher,
                "command": list(launch.instance.argv),      # exactly what is executed for the instance
                "entry_point_command": list(launch.argv),   # the launcher's command inside it
                "environment": dict(sorted(launch.env.items())),
                "sandbox_problem": launch.instance.sandbox_problem,
            }
            for launch in launches
        ],
    }


def _print_plan(launches: list, expected_cost: str, as_json: bool) -> None:
    import shlex

    plan = plan_json(launches)
    if as_json:
        click.echo(json.dumps({**plan, "expected_cost": expected_cost}, indent=2))
        return
    problem = plan["instances"][0]["sandbox_problem"] if plan["instances"] else None
    if problem:
        _show_warning(f"instances would run without a sandbox: {problem}", UserWarning, "", 0)
    click.echo(f"job {plan['job_name']}: {len(plan['instances'])} instance(s); dry run, nothing started")
    click.echo(expected_cost)
    for item in plan["instances"]:
        click.echo(click.style(f"\n{item['host']}", bold=True) + f"  (launcher {item['launcher']})")
        click.echo(f"  command:     {shlex.join(item['command'])}")
        click.echo(f"  entry point: {shlex.join(item['entry_point_command'])}")
        click.echo("  environment:")
        for key, value in item["environment"].items():
            click.echo(f"    {key}={value}")


# -- jobs -------------------------------------------------------------------------------------------
@cli.group()
def jobs() -> None:
    """List, describe, wait for, stop jobs and read their logs."""


@jobs.command("list", epilog="""\b
Examples:
  shipyard jobs list --status InProgress
  shipyard jobs list --name-contains mnist --since 7d
  shipyard jobs list -o json | jq -r '.[] | select(.status == "Failed") | .name'""")
@click.option("--status", callback=lambda ctx, param, value: _status(value), metavar="|".join(STATUSES),
              help="Only jobs in this status.")
@click.option("--name-contains", metavar="TEXT", help="Only jobs whose name contains TEXT.")
@click.option("--since", metavar="DURATION|DATE", help="Only jobs created in the last 7d (or since 2026-11-01).")
@click.option("--limit", type=int, help="At most this many, newest first.")
@click.option("--on-cluster", is_flag=True,
              help="The jobs whose controller lives on the Ray cluster named by RAY_ADDRESS (its home), not this "
                   "machine's.")
@output_option
@click.pass_context
def list_jobs(ctx: click.Context, status: str | None, name_contains: str | None, since: str | None,
              limit: int | None, on_cluster: bool, output: str) -> None:
    """Jobs newest first: status, instances, strategy, duration, cost; a job waiting for capacity shows its
    place in the queue. Names are shown whole: on a narrow terminal the less needed columns go."""
    import datetime
    import time

    if on_cluster:
        from shipyard import settings
        from shipyard.control import cluster_home as home

        if not settings.ray_address_given():
            raise click.UsageError("--on-cluster lists a Ray cluster's jobs: name the cluster with "
                                   "RAY_ADDRESS=HEAD_IP:6379 (or ray://HEAD_IP:10001)")
        ctx.exit(home.run(["jobs", *(a for a in _command_line(ctx) if a != "--on-cluster")]))

    from rich.markup import escape

    from shipyard.control.describe import summaries
    from shipyard.planner.request import since as moment_since
    from shipyard.store.queue import CapacityQueue, ordinal

    store = _store()
    after = moment_since("--since", since) if since else None
    records = [r for r in store.list_jobs(name_contains=name_contains) if after is None or r.creation_time >= after]
    # Filtered by status after reconciling: a job whose controller died says InProgress until then.
    rows = [row for row in summaries(store, records) if status is None or row["status"] == status][:limit]
    places = {name: place for place, name in enumerate(CapacityQueue(store).waiting(), start=1)}
    if output == "json":
        echo_json([{**row, "queue_place": places.get(row["name"])} for row in rows])
        return
    console = table_console()
    if not rows:
        console.print("no jobs" + (f" with status {status}" if status else "") + (" matching" if name_contains or since else ""))
        return
    cells = {"NAME": [], "STATUS": [], "SECONDARY STATUS": [], "INSTANCES": [], "STRATEGY": [], "CREATED": [],
             "DURATION": [], "COST": []}
    for row in rows:
        queued = f" ({ordinal(places[row['name']])} in queue)" if row["name"] in places else ""
        for column, value in zip(cells, (
                row["name"], row["status"], row["secondary_status"] + queued, row["instance_type"], row["strategy"],
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["creation_time"])),
                str(datetime.timedelta(seconds=int(row["duration"]))),
                "-" if row["cost"] is None else f"${row['cost']:,.4f}")):
            cells[column].append(value)
    shown = fitting(cells, console.width, drop=("CREATED", "STRATEGY", "INSTANCES", "SECONDARY STATUS", "COST"))
    rendered = table(*shown)
    for i, row in enumerate(rows):
        style = STATUS_STYLES.get(row["status"], "")
        rendered.add_row(*(f"[{style}]{cells[c][i]}[/{style}]" if c == "STATUS" else escape(cells[c][i]) for c in shown))
    console.print(rendered)


def _status(value: str | None) -> str | None:
    if value is None:
        return None
    found = status_named(value)
    if found:
        return found
    from shipyard.errors import closest

    guess = closest(value, STATUSES)
    raise click.BadParameter((f"did you mean {guess!r}? " if guess else "") + f"use one of {', '.join(STATUSES)}")


@jobs.command()
@click.argument("job", shell_complete=complete_jobs)
def describe(job: str) -> None:
    """The job as DescribeTrainingJob returns it, as JSON."""
    _run_where_it_lives(job)
    from shipyard.control.describe import describe as describe_job

    echo_json(describe_job(_store(), job))


@jobs.command()
@click.argument("job", shell_complete=complete_jobs)
@click.option("--logs", is_flag=True, help="Show every host's log lines too.")
@click.pass_context
def wait(ctx: click.Context, job: str, logs: bool) -> None:
    """Wait for JOB to end; exit 0 when it Completed, 1 otherwise."""
    _run_where_it_lives(job)
    try:
        description = _watch(_store(), job, show_logs=logs)
    except KeyboardInterrupt:
        ctx.exit(130)
    ctx.exit(0 if description["TrainingJobStatus"] == "Completed" else 1)


@jobs.command()
@click.argument("job", shell_complete=complete_jobs)
def stop(job: str) -> None:
    """Stop JOB: SIGTERM to its processes, SIGKILL after its grace period; what it saved is uploaded."""
    _run_where_it_lives(job)
    from shipyard.control.reconcile import stop as stop_job

    record = stop_job(_store(), job)
    click.echo(f"stopping {job} (SIGTERM now, SIGKILL after {record.spec.stop_grace_seconds:g} s); "
               f"`shipyard wait {job}` waits for it")


@jobs.command()
@click.argument("job", shell_complete=complete_jobs)
@click.option("--keep-alive", "keep_alive", type=click.IntRange(0, 21600), required=True, metavar="SECONDS",
              help="The job's new keep-alive period, counted from when it ended; 0 releases its warm pool.")
def update(job: str, keep_alive: int) -> None:
    """Change how long JOB's warm pool is kept (UpdateTrainingJob); `--keep-alive 0` releases it."""
    from shipyard.sdk.job import TrainingJob

    TrainingJob(job, _store()).update(keep_alive)
    click.echo(f"{job}: keep-alive {keep_alive} s")


@jobs.command(epilog="""\b
Examples:
  shipyard logs JOB --follow
  shipyard logs JOB --host algo-2 --tail 50""")
@click.argument("job", shell_complete=complete_jobs)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option("--host", "hosts", multiple=True, metavar="HOST", help="Only this instance's log (repeatable).")
@click.option("--tail", type=click.IntRange(min=0), metavar="N", help="Start from each host's last N lines.")
def logs(job: str, follow: bool, hosts: tuple[str, ...], tail: int | None) -> None:
    """Every host's log, each line prefixed by its host (and its rank where a host runs several)."""
    _run_where_it_lives(job)
    import time

    from shipyard.control.reconcile import reconcile
    from shipyard.errors import unknown_name_error
    from shipyard.sdk.watch import log_console, print_log_lines, tails

    store = _store()
    console = log_console()
    log_tails = tails(store, job)
    for host in hosts:
        if host not in [t.host for t in log_tails]:
            raise unknown_name_error("--host", host, [t.host for t in log_tails])
    log_tails = [t for t in log_tails if not hosts or t.host in hosts]
    if tail is not None:
        for log_tail in log_tails:
            log_tail.offset = _last_lines_start(log_tail.path, tail)
    while True:
        # Checked before reading, so the lines written before the job ended are all printed.
        done = not follow or reconcile(store, job).terminal
        for tail in log_tails:
            print_log_lines(console, tail, final=done)
        if done:
            return
        try:
            time.sleep(POLL_SECONDS)
        except KeyboardInterrupt:
            return


@jobs.command(epilog="""\b
Examples:
  shipyard jobs delete my-job-2026-11-20-10-00-00-000
  shipyard jobs delete my-job --delete-output     # its model and output in storage too""")
@click.argument("names", nargs=-1, required=True, metavar="JOB...", shell_complete=complete_jobs)
@click.option("--delete-output", is_flag=True,
              help="Also delete what the job wrote under its output path (<output_path>/<job>/: model, output, "
                   "source, debugger and profiler data). Checkpoints are never deleted.")
def delete(names: tuple[str, ...], delete_output: bool) -> None:
    """Delete ended jobs' local data: their records, logs, metrics and the channel copies in their
    directories. What they wrote to storage stays unless --delete-output."""
    from shipyard.control.reconcile import reconcile

    store = _store()
    for name in names:
        reconcile(store, name)  # a job whose controller died is Failed now, and can go
    for name in names:
        _delete_job(store, name, delete_output)


def _delete_job(store, name: str, delete_output: bool) -> None:
    from shipyard.storage.uri import join, remove_tree

    output = join(store.get_job(name).spec.output_path, name)
    store.delete_job(name)
    if delete_output:
        remove_tree(output)
    click.echo(f"deleted {name}" + (f" and {output}" if delete_output else ""))


@jobs.command(epilog="""\b
Examples:
  shipyard jobs prune --before 30d --dry-run     # what would go
  shipyard jobs prune --before 7d --status Failed --yes""")
@click.option("--before", required=True, metavar="DURATION|DATE",
              help="Jobs that ended more than this long ago (30d, 12h) or before this date (2026-11-01).")
@click.option("--status", callback=lambda ctx, param, value: _status(value), metavar="Completed|Failed|Stopped",
              help="Only jobs that ended in this status.")
@click.option("--delete-output", is_flag=True, help="Also delete what each job wrote under its output path.")
@click.option("--dry-run", is_flag=True, help="List the jobs that would be deleted; delete nothing.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
def prune(before: str, status: str | None, delete_output: bool, dry_run: bool, yes: bool) -> None:
    """Delete the local data of every ended job that ended before --before (tuning jobs' trials go with
    their tuning job: `shipyard tuning delete`; jobs on a live warm pool stay)."""
    from shipyard.control.reconcile import reconcile
    from shipyard.planner.request import since

    store = _store()
    for record in store.list_jobs():
        if not record.terminal:
            reconcile(store, record.name)  # a job whose controller died is Failed now, and can go
    names = store.prunable(since("--before", before), status)
    if not names:
        click.echo("no jobs to prune")
        return
    for name in names:
        if dry_run:
            click.echo(name)
    if dry_run:
        return
    if not yes:
        click.confirm(f"delete the local data of {len(names)} job(s)"
                      + (" and their output in storage" if delete_output else "") + "?", abort=True)
    for name in names:
        _delete_job(store, name, delete_output)


def _last_lines_start(path, count: int, block: int = 1 << 16) -> int:
    """Where a log's last `count` complete lines start, read backwards a block at a time (a log may be
    large); a line still being written is left for the reader that follows."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return 0
    with f:
        end = f.seek(0, 2)
        start, data = end, b""
        while start > 0 and data.count(b"\n") <= count:  # also the break before the first line kept
            start = max(0, start - block)
            f.seek(start)
            data = f.read(end - start)
    offset = data.rfind(b"\n") + 1
    for _ in range(count):
        if offset == 0:
            break
        offset = data.rfind(b"\n", 0, offset - 1) + 1
    return start + offset


@cli.command()
@click.option("--by", type=click.Choice(["day", "prefix", "tag"]), default="day", show_default=True,
              help="Group by the day a job was created, its name without the generated suffix, or each tag.")
@click.option("--since", metavar="DURATION|DATE", help="Only jobs created in the last 7d (or since 2026-11-01).")
@output_option
def costs(by: str, since: str | None, output: str) -> None:
    """What jobs cost, added up: cost, what on demand would have cost, spot savings and warm pools'
    retained time (each job's describe() Shipyard.Cost), then the total."""
    from shipyard.control.costs import job_costs, totals
    from shipyard.planner.request import since as moment_since

    rows = totals(job_costs(_store(), moment_since("since", since) if since else None), by)
    if output == "json":
        echo_json({"by": by, "rows": rows})
        return
    header = (by, "jobs", "cost $", "on demand $", "spot savings $", "warm pools $")
    table = [(str(r[by]), str(r["jobs"]), f"{r['cost']:,.2f}", f"{r['on_demand']:,.2f}", f"{r['spot_savings']:,.2f}",
              f"{r['warm_pool_retained']:,.2f}") for r in rows]
    widths = [max(len(row[i]) for row in (header, *table)) for i in range(len(header))]
    for row in (header, *table):
        click.echo("  ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                             for i, (cell, width) in enumerate(zip(row, widths))))


@cli.command()
@click.argument("job", shell_complete=complete_jobs)
def report(job: str) -> None:
    """Write JOB's profiling report (one HTML file, viewable offline) and print its path."""
    from shipyard.rules.profiler.report import write_report

    click.echo(str(write_report(_store(), job)))


@cli.group()
def debugger() -> None:
    """Tensors a job's debugger hook saved."""


@debugger.command()
@click.argument("job_or_path")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Directory for the event files.")
def tensorboard(job_or_path: str, out: str) -> None:
    """Export JOB_OR_PATH's saved tensors (a job name, or a path/URI) as TensorBoard event files under OUT
    (OUT/<MODE>/<worker>/), and print OUT for `tensorboard --logdir`."""
    from shipyard.debugger.tensorboard import export
    from shipyard.errors import NotFoundError

    if not export(job_or_path, out):
        raise NotFoundError(f"no saved tensors in {job_or_path}")
    click.echo(out)


@cli.group()
def pools() -> None:
    """Warm pools: instances kept alive after a job for the next matching one (docs/warm-pools.md)."""


@pools.command("list")
@click.option("--all", "everything", is_flag=True, help="Terminated pools too.")
@output_option
def list_pools(everything: bool, output: str) -> None:
    """Each pool: status, instances, the job on it or last on it, time left."""
    import dataclasses
    import time

    from shipyard.control.pools import reconcile_pools
    from shipyard.store.pools import PoolStore

    store = _store()
    reconcile_pools(store)
    listed = PoolStore(store).list(include_terminated=everything)
    if output == "json":
        echo_json([dataclasses.asdict(pool) for pool in listed])
        return
    console = table_console()
    if not listed:
        console.print("no warm pools" + ("" if everything else " in use or available (--all shows ended ones)"))
        return
    rendered = table("POOL", "STATUS", "INSTANCES", "JOB", "EXPIRES IN / ENDED", wrap=("EXPIRES IN / ENDED",))
    for pool in listed:
        left = f"{max(0, pool.expires_at - time.time()):.0f} s" if pool.expires_at else (pool.end_reason or "")
        rendered.add_row(pool.name, pool.status, f"{pool.instance_count} x {pool.instance_type}", pool.job, left)
    console.print(rendered)


@pools.command("release")
@click.argument("pool", shell_complete=complete_pools)
def release_pool(pool: str) -> None:
    """End an Available pool now (its instances stop, its billing with them)."""
    from shipyard.store.pools import PoolStore

    PoolStore(_store()).release(pool)
    click.echo(f"{pool}: Terminated")


@cli.group()
def spot() -> None:
    """Managed spot training: simulate capacity being taken away."""


@spot.command()
@click.argument("job", shell_complete=complete_jobs)
@click.option("--host", help="The instance whose capacity is taken (default: the job's).")
def interrupt(job: str, host: str | None) -> None:
    """Interrupt JOB as a spot reclaim would: notice, checkpoint flush, a new attempt when capacity returns."""
    from shipyard.control.reconcile import reconcile
    from shipyard.errors import ConflictError, unknown_name_error

    store = _store()
    record = reconcile(store, job)
    if not record.spec.use_spot_instances:
        raise ConflictError(f"job {job} does not use spot instances; there is no capacity to take away")
    if host is not None and host not in record.spec.hosts:
        raise unknown_name_error("--host", host, record.spec.hosts)
    if record.terminal or not store.request_interrupt(job, host):
        raise ConflictError(f"job {job} already ended {store.get_job(job).status}; there is nothing to interrupt")
    click.echo(f"interrupting {job}" + (f" ({host})" if host else "") + f"; `shipyard wait {job}` follows it")


@cli.command(epilog="""\b
Examples:
  shipyard server                      # http://127.0.0.1:8765, the dashboard and the API
  shipyard server --port 9000
  shipyard server --host 0.0.0.0       # other machines too: every request then needs the token
  eval "$(shipyard server --print-env)"   # in another shell: boto3 and the sagemaker SDK talk to it""")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback needs the token for every request.")
@click.option("--port", type=int, default=8765, show_default=True, help="Port (0: any free one).")
@click.option("--token", envvar="SHIPYARD_SERVER_TOKEN", help="The token to require (default: a new random one; "
              "or SHIPYARD_SERVER_TOKEN).")
@click.option("--default-bucket", help="The bucket the sagemaker SDK's default_bucket() names "
              "(default: sagemaker-<region>-000000000000).")
@click.option("--new-aws-keys", is_flag=True, help="Issue new keys for the AWS API; the old ones stop working.")
@click.option("--aws-keys-from-env", is_flag=True, help="The AWS API accepts the AWS_ACCESS_KEY_ID / "
              "AWS_SECRET_ACCESS_KEY set here (an S3 store's keys) instead of keys it issues.")
@click.option("--print-env", is_flag=True, help="Print the running server's AWS environment as `export` lines "
              "and exit.")
def server(host: str, port: int, token: str | None, default_bucket: str | None, new_aws_keys: bool,
           aws_keys_from_env: bool, print_env: bool) -> None:
    """Serve the dashboard and the HTTP API over this machine's jobs, tuning jobs, pools and costs, and an
    AWS API (SageMaker, CloudWatch, CloudWatch Logs, STS) that boto3 and the sagemaker SDK can be pointed
    at. Jobs keep running when it stops; the CLI and the SDK never need it (docs/server.md)."""
    from shipyard.server.serve import exports, plan, running_environment, serve

    store = _store()
    if print_env:
        click.echo("\n".join(exports(running_environment(store))))
        return
    serve(plan(host, port, token, store, default_bucket, new_aws_keys, aws_keys_from_env), store, say=click.echo)


@cli.command(epilog="""\b
Examples:
  eval "$(shipyard completion bash)"      # in ~/.bashrc
  eval "$(shipyard completion zsh)"       # in ~/.zshrc
  shipyard completion fish > ~/.config/fish/completions/shipyard.fish""")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the script that makes SHELL complete shipyard's commands, options, and the names of jobs,
    tuning jobs and pools (read from $SHIPYARD_HOME as you type)."""
    from click.shell_completion import get_completion_class

    click.echo(get_completion_class(shell)(cli, {}, "shipyard", "_SHIPYARD_COMPLETE").source())


# Short aliases: `shipyard describe JOB` is `shipyard jobs describe JOB`.
for _command in (describe, wait, stop, logs):
    cli.add_command(_command)

from shipyard.cli.tuning import tune, tuning  # noqa: E402  (light: its commands import what they use)

cli.add_command(tune)
cli.add_command(tuning)


def main(argv: list[str] | None = None) -> int:
    return cli.main(args=argv, prog_name="shipyard")


if __name__ == "__main__":
    sys.exit(main())

from shipyard.cli.plan import plan  # noqa: E402  (light, as tuning's)

cli.add_command(plan)
