"""`shipyard tune TUNING.yaml` and `shipyard tuning list | describe | jobs | stop | wait`: tuning jobs
from the command line, from any shell (a tuning job runs in its own detached process)."""

from __future__ import annotations

import json

import click

from shipyard.cli.listing import complete_tuning_jobs, echo_json, output_option, table, table_console


def _tuning_store():
    from shipyard.store import Store
    from shipyard.store.tuning import TuningStore

    return TuningStore(Store())


@click.command(epilog="""\b
Examples:
  shipyard tune tuning.yaml                 # submit, then follow until it ends
  shipyard tune tuning.yaml --dry-run       # the first trials' hyperparameters; nothing runs
  shipyard tune tuning.yaml --detach""")
@click.argument("target", metavar="TUNING.yaml")
@click.option("--job-name", help="The tuning job's name (at most 32 characters; default: generated).")
@click.option("--dry-run", is_flag=True, help="Print the first trials' hyperparameters; start nothing.")
@click.option("--trials", type=click.IntRange(min=1), default=3, show_default=True,
              help="With --dry-run: how many trials to show.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: print them as JSON.")
@click.option("--detach", is_flag=True, help="Print the tuning job's name and return; it keeps running.")
@click.pass_context
def tune(ctx: click.Context, target: str, job_name: str | None, dry_run: bool, trials: int, as_json: bool,
         detach: bool) -> None:
    """Run a hyperparameter tuning job: TUNING.yaml is a job file with a `tuning:` section."""
    from shipyard.cli import jobfile, tunefile

    if as_json and not dry_run:
        raise click.UsageError("--json goes with --dry-run")
    request, settings = tunefile.load(target)
    tuner = tunefile.make_tuner(request, settings)
    inputs = jobfile.fit_inputs(request)
    name = job_name or request.job_name
    if dry_run:
        planned = tuner.plan(inputs, trials=trials, job_name=name)
        if as_json:
            click.echo(json.dumps(planned, indent=2))
        else:
            for number, hyperparameters in enumerate(planned, 1):
                click.echo(f"trial {number}: " + " ".join(f"{k}={v}" for k, v in hyperparameters.items()))
        return
    tuner.fit(inputs, job_name=name, wait=False)
    job = tuner.latest_tuning_job
    if detach:
        click.echo(job.name)
        return
    click.echo(f"{job.name}  (detach with Ctrl-C; `shipyard tuning stop {job.name}` stops it)", err=True)
    try:
        description = job.wait()
    except KeyboardInterrupt:
        click.echo(f"tuning job {job.name} keeps running: `shipyard tuning wait {job.name}`", err=True)
        ctx.exit(130)
    ctx.exit(_report(description))


def _report(description: dict) -> int:
    best = description.get("BestTrainingJob")
    if best:
        metric = best["FinalHyperParameterTuningJobObjectiveMetric"]
        click.echo(f"best: {best['TrainingJobName']} {metric['MetricName']}={metric['Value']:.6g} "
                   + " ".join(f"{k}={v}" for k, v in best["TunedHyperParameters"].items()))
    status = description["HyperParameterTuningJobStatus"]
    if description.get("FailureReason"):
        click.echo(f"{description['HyperParameterTuningJobName']} {status}: {description['FailureReason']}", err=True)
    return 0 if status == "Completed" else 1


@click.group()
def tuning() -> None:
    """List, describe, stop and wait for tuning jobs, and list their training jobs."""


@tuning.command("list")
@output_option
def list_tuning(output: str) -> None:
    """Tuning jobs newest first: status, strategy, training jobs ended of all, the best so far."""
    from shipyard.tuning.describe import describe
    from shipyard.tuning.lifecycle import reconcile

    store = _tuning_store()
    rows = []
    for record in [reconcile(store, r.name) for r in store.list()]:
        description = describe(store.store, record.name)
        counters = description["TrainingJobStatusCounters"]
        best = description.get("BestTrainingJob")
        rows.append({"name": record.name, "status": record.status, "strategy": record.spec.strategy,
                     "jobs_ended": sum(counters.values()) - counters["InProgress"], "jobs": record.spec.total_jobs(),
                     "best_job": best["TrainingJobName"] if best else None,
                     "best_objective": best["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] if best else None})
    if output == "json":
        echo_json(rows)
        return
    console = table_console()
    if not rows:
        console.print("no tuning jobs")
        return
    rendered = table("NAME", "STATUS", "STRATEGY", "JOBS", "BEST")
    for row in rows:
        rendered.add_row(row["name"], row["status"], row["strategy"], f"{row['jobs_ended']}/{row['jobs']}",
                         "-" if row["best_job"] is None else f"{row['best_objective']:.6g} ({row['best_job']})")
    console.print(rendered)


@tuning.command("describe")
@click.argument("name", shell_complete=complete_tuning_jobs)
def describe_tuning(name: str) -> None:
    """The tuning job as DescribeHyperParameterTuningJob returns it, as JSON."""
    from shipyard.tuning.describe import describe

    echo_json(describe(_tuning_store().store, name))


@tuning.command("jobs")
@click.argument("name", shell_complete=complete_tuning_jobs)
@output_option
def tuning_jobs(name: str, output: str) -> None:
    """The tuning job's training jobs: status, objective, tuned values, and why any was stopped; as JSON,
    each as ListTrainingJobsForHyperParameterTuningJob's TrainingJobSummaries has it."""
    from rich.markup import escape

    from shipyard.tuning.describe import summaries

    store = _tuning_store()
    store.get(name)  # NotFoundError naming the closest
    jobs = summaries(store.store, name)
    if output == "json":
        echo_json(jobs)
        return
    rendered = table("JOB", "STATUS", "OBJECTIVE", "HYPERPARAMETERS", "STOPPED BECAUSE",
                     wrap=("HYPERPARAMETERS", "STOPPED BECAUSE"))
    for job in jobs:
        metric = job.get("FinalHyperParameterTuningJobObjectiveMetric")
        rendered.add_row(job["TrainingJobName"], job["TrainingJobStatus"], f"{metric['Value']:.6g}" if metric else "-",
                         escape(" ".join(f"{k}={v}" for k, v in job["TunedHyperParameters"].items())),
                         escape(job.get("StopReason", "")))
    table_console().print(rendered)


@tuning.command("stop")
@click.argument("name", shell_complete=complete_tuning_jobs)
def stop_tuning(name: str) -> None:
    """Stop the tuning job and every training job it is running."""
    from shipyard.errors import ConflictError
    from shipyard.tuning.lifecycle import stop

    store = _tuning_store()
    if not stop(store, name):
        raise ConflictError(f"tuning job {name} already ended {store.get(name).status}; there is nothing to stop")
    click.echo(f"stopping {name} and its running training jobs; `shipyard tuning wait {name}` waits for it")


@tuning.command("delete")
@click.argument("name", shell_complete=complete_tuning_jobs)
def delete_tuning(name: str) -> None:
    """Delete an ended tuning job's local data and its training jobs' (what they wrote to storage stays)."""
    from shipyard.tuning.lifecycle import reconcile

    store = _tuning_store()
    trials = len(store.trials(reconcile(store, name).name))
    store.delete(name)
    click.echo(f"deleted {name} and its {trials} training job(s)")


@tuning.command("wait")
@click.argument("name", shell_complete=complete_tuning_jobs)
@click.pass_context
def wait_tuning(ctx: click.Context, name: str) -> None:
    """Wait for the tuning job to end; exit 0 when it Completed, 1 otherwise."""
    from shipyard.sdk.tuner import TuningJob

    store = _tuning_store()
    store.get(name)
    try:
        description = TuningJob(name, store.store).wait()
    except KeyboardInterrupt:
        ctx.exit(130)
    ctx.exit(_report(description))
