"""`shipyard plan --calibrate`: a few steps of the user's own job on 1 and 2 instances of its own type,
through shipyard's profiler (the step timeline), measured as the planner's calibrated model needs them
(planner/models.py `calibrated_wall`): a step's time on each count, the time from submission to the
first step, and the time from the end of training to the job's end. Each run is a real job (named
`<job>-calibrate-<n>`), stopped once every instance has recorded enough steps; a run that fails is an
error that shows the script's."""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

from shipyard.errors import ValidationError
from shipyard.runtime.profiler.memory import ENV_STEP, MEMORY_DIR

WARMUP_STEPS = 5          # not measured: allocations, the first collectives, the profiler's own start
MEASURED_STEPS = 20       # then measured on every instance before the run is stopped
POLL_SECONDS = 0.5
LOG_LINES = 10            # of a failed run's log, in the error


@dataclass(frozen=True)
class Measure:
    instances: int
    step_seconds: float    # the median step of the slowest instance (a step waits for every rank)
    start_seconds: float   # from submission to the first step's start
    end_seconds: float     # from the stop (the end of training) to the job's end
    steps: int             # steps measured per instance
    # The model's parameters and one step's activations per rank (runtime/profiler/memory.py), the
    # largest over the ranks; None where nothing was measured (a script without a torch model).
    parameters: int | None = None
    activation_bytes: int | None = None


@dataclass(frozen=True)
class Calibration:
    instance_type: str
    cores: int             # this machine's, which local instances share
    threads: int           # per instance: its type's vcpus, or every core for a type that shares them
    measures: tuple[Measure, ...]

    def at(self, instances: int) -> Measure:
        return next(m for m in self.measures if m.instances == instances)

    def to_dict(self) -> dict:
        return asdict(self)


def calibrate(estimator, inputs=None, counts: tuple[int, ...] = (1, 2)) -> Calibration:
    import os

    from shipyard.spec.catalog import get_instance_type

    kind = get_instance_type(estimator.instance_type)
    cores = os.cpu_count() or 1
    measures = tuple(_run(estimator, inputs, count) for count in counts)
    # The threads a training process computes with: the job's OMP_NUM_THREADS, else its type's vcpus, else
    # (a type that shares this machine) every core, as torch takes them.
    threads = int((estimator.environment or {}).get("OMP_NUM_THREADS") or kind.vcpus or cores)
    return Calibration(estimator.instance_type, cores, min(threads, cores), measures)


def _run(estimator, inputs, count: int) -> Measure:
    from shipyard.control.submit import submit
    from shipyard.rules.profiler.data import ProfilerReader
    from shipyard.spec.build import build
    from shipyard.spec.job import JobSpec
    from shipyard.spec.names import generate_job_name
    from shipyard.spec.profiler import FrameworkProfile, ProfilerConfig

    store = estimator._store()
    name = generate_job_name(f"{(estimator.base_job_name or estimator.default_base_job_name)[:30]}-calibrate-{count}")
    base = estimator._spec(inputs, name, store)
    if base.instance_groups:
        raise ValidationError("calibrate", name, "calibrates a job of one instance type; give --baseline for a "
                              "heterogeneous one")
    spec = build(JobSpec, "calibrate", **{
        **base.model_dump(), "instance_count": count,
        # the step timeline, written every second so the steps can be counted while it runs
        "profiler_config": ProfilerConfig(framework_profile_params=FrameworkProfile(file_close_interval=1)),
        # measured as it trains: no rules, interruptions, warm pool or budget of the job's own
        "rules": (), "use_spot_instances": False, "max_wait": None, "spot_simulation": None,
        "keep_alive_period_in_seconds": None, "max_cost": None,
        "environment": {**base.environment, ENV_STEP: str(WARMUP_STEPS)}})
    submitted = time.time()
    submit(store, spec, estimator._pack)
    reader = ProfilerReader(spec.profiler_config.output_uri(spec.output_path, name))
    hosts = [f"algo-{i}" for i in range(1, count + 1)]
    stopped = None
    try:
        while not store.get_job(name).terminal:
            time.sleep(POLL_SECONDS)
            data = reader.read(operators=False)
            if stopped is None and all(len(data.step_durations(h, "TRAIN")) >= WARMUP_STEPS + MEASURED_STEPS
                                       for h in hosts):
                stopped = time.time()
                store.request_stop(name, "calibrated: enough steps measured")
    except BaseException:   # Ctrl-C while it measures: the calibration job does not run on without it
        store.request_stop(name, "the calibration was interrupted")
        raise
    record = store.get_job(name)
    if record.status == "Failed":
        log = store.log_path(name, "algo-1")
        lines = [line for line in (log.read_text(errors="replace").splitlines() if log.exists() else [])
                 if "shipyard-agent" not in line]
        # torchrun's own report of the failure follows the script's last lines: those are the ones to show
        ours = next((i for i, line in enumerate(lines) if "torch/distributed/elastic" in line), len(lines))
        script = lines[:ours][-LOG_LINES:]
        raise ValidationError("calibrate", name, f"the calibration run on {count} instance(s) failed: "
                              f"{record.failure_reason.splitlines()[0]}; algo-1's last lines:\n" + "\n".join(script))
    data = reader.read(operators=False)
    steps = {h: data.step_durations(h, "TRAIN")[WARMUP_STEPS:] for h in hosts}
    if any(len(s) < 2 for s in steps.values()):
        raise ValidationError("calibrate", name, f"the job ended after fewer than {WARMUP_STEPS + 2} steps on "
                              "each instance, too few to measure: calibrate on a job that trains longer, or give "
                              "--baseline instead")
    first = min(s.start for h in hosts for s in data.step_durations(h, "TRAIN")[:1])
    last = max(s.start + s.duration for h in hosts for s in steps[h])
    memory = _memory(reader.uri)
    return Measure(
        instances=count, step_seconds=max(statistics.median(s.duration for s in steps[h]) for h in hosts),
        start_seconds=first - submitted, end_seconds=record.training_end_time - (stopped or last),
        steps=min(len(s) for s in steps.values()),
        parameters=max((m["parameters"] for m in memory), default=None) or None,
        activation_bytes=max((m["activation_bytes"] for m in memory), default=None))


def _memory(uri: str) -> list[dict]:
    """What each rank's memory probe wrote under the profiler's output."""
    import json

    from shipyard.storage.uri import filesystem

    fs, root = filesystem(uri)
    found = []
    for path in fs.glob(f"{root.rstrip('/')}/{MEMORY_DIR}/*.json"):
        with fs.open(path, "r") as f:
            found.append(json.load(f))
    return found
