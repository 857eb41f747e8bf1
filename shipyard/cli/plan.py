"""`shipyard plan`: which strategy, instance type and count, spot or not and input mode meet a deadline
and a budget (docs/planner.md)."""

from __future__ import annotations

import json

import click


@click.command(epilog="""\b
Examples:
  shipyard plan --deadline 8h --baseline 24h@ml.p3.2xlarge
  shipyard plan --deadline 8h --baseline 24h@ml.p3.2xlarge --hard-deadline --budget 500
  shipyard plan job.yaml --deadline 2d --baseline 200h --model-size 10GB --dataset-size 10TB --json
  shipyard plan job.yaml --deadline 1h --calibrate --steps 5000""")
@click.argument("jobfile", required=False, metavar="[JOB.yaml]")
@click.option("--deadline", required=True, help="How long from now (8h, 90m, 2d) or when (2026-11-26T18:00).")
@click.option("--baseline", metavar="HOURS[@TYPE]",
              help="What one instance takes for the whole training: 24h@ml.p3.2xlarge (TYPE: the job's).")
@click.option("--budget", type=click.FloatRange(min=0, min_open=True), help="At most this many USD.")
@click.option("--parameters", help="The model's parameter count: 70e9, 7B, 350M.")
@click.option("--model-size", help="The model's weights: 10GB (at --dtype), instead of --parameters.")
@click.option("--dataset-size", help="10TB (default: the job file's channels, listed).")
@click.option("--hard-deadline", is_flag=True, help="Missing it is not an option: on demand before spot.")
@click.option("--no-interruptions", is_flag=True, help="No spot options at all.")
@click.option("--calibrate", is_flag=True, help="Measure instead of --baseline: a few steps of JOB.yaml on 1 and "
              "2 instances of its type, through the profiler (needs --steps).")
@click.option("--steps", help="With --calibrate: the whole training's optimizer steps on one instance.")
@click.option("--step-time", help="One optimizer step on the baseline: 1.2s (default: from the model size).")
@click.option("--activation-size", help="One accelerator's activations per micro-batch (default 2GB).")
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp32"]), default="bf16", show_default=True)
@click.option("--optimizer", type=click.Choice(["adam", "sgd"]), default="adam", show_default=True)
@click.option("--max-instances", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Options shown.")
@click.option("--json", "as_json", is_flag=True, help="Every option, best first, and why, as JSON.")
def plan(jobfile: str | None, top: int, as_json: bool, **options) -> None:
    """Options for meeting a deadline within a budget, best first: strategy, instance type and count, spot
    or on demand, input mode, predicted hours, cost, memory per accelerator and the chance of missing the
    deadline; then why the first is first."""
    from shipyard.sdk.plan import plan as make_plan

    estimator = inputs = None
    if jobfile:
        from shipyard.cli import jobfile as jobfiles

        request = jobfiles.load(jobfile)
        estimator, inputs = jobfiles.make_estimator(request), jobfiles.fit_inputs(request)
    result = make_plan(interruptions_ok=not options.pop("no_interruptions"), estimator=estimator, inputs=inputs,
                       **options)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    header = ("#", "instances", "strategy", "spot", "input", "hours", "cost $", "GB/acc", "risk")
    rows = [(str(i), f"{o.instance_count} x {o.instance_type}", o.strategy, "spot" if o.spot else "on demand",
             o.input_mode + (" sharded" if o.s3_data_distribution == "ShardedByS3Key" else ""), f"{o.hours:.1f}",
             f"{o.cost:,.2f}", "" if o.memory_per_accelerator_gb is None else f"{o.memory_per_accelerator_gb:g}",
             f"{o.deadline_risk:.0%}" + ("" if o.meets_deadline else " (misses)"))
            for i, o in enumerate(result.options[:top], start=1)]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    click.echo("")
    click.echo(result.why)
