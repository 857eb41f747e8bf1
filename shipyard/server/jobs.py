"""Training jobs: the list with filters and pages, one job (its describe() and a summary row), its
attempts, events, metrics, system utilisation, rule findings, profiler report and logs (a page of lines,
or a live stream); submit a job file; stop a job."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Body, Depends, Query
from fastapi.responses import HTMLResponse, StreamingResponse

from shipyard.server.app import reader, writer
from shipyard.server.recent import Recent
from shipyard.spec.statuses import STATUSES, TERMINAL_STATUSES, status_named
from shipyard.store import JobRecord, Store

router = APIRouter(tags=["jobs"])
POINTS = 2000                 # per series unless asked: enough for a chart as wide as a screen
LOG_PAGE_BYTES = 1 << 20      # one read of a log: at most 1 MiB of lines
STREAM_POLL_SECONDS = 0.5
# What a page polls, shared between the pages that poll it (at most a second old; a page polls every 2 s).
RECENT = Recent(1.0)
Reader = Annotated[Store, Depends(reader)]
Writer = Annotated[Store, Depends(writer)]


def _status(status: str | None) -> str | None:
    from shipyard.errors import unknown_name_error

    if status is None:
        return None
    found = status_named(status)
    if found is None:
        raise unknown_name_error("status", status, STATUSES)
    return found


@router.get("/jobs")
def list_jobs(store: Reader, status: str | None = None,
              name: Annotated[str | None, Query(description="Only jobs whose name contains this")] = None,
              limit: Annotated[int, Query(ge=1, le=500)] = 50, offset: Annotated[int, Query(ge=0)] = 0) -> dict:
    """Jobs newest first, one page of summary rows, and how many match in all."""
    from shipyard.control.describe import summaries

    status = _status(status)
    records = store.list_jobs(status=status, name_contains=name, limit=limit, offset=offset)
    rows = summaries(store, records)
    return {"total": store.count_jobs(status=status, name_contains=name), "limit": limit, "offset": offset,
            "jobs": rows}


@router.get("/jobs/{name}")
def get_job(store: Reader, name: str) -> dict:
    """The job as DescribeTrainingJob returns it (`describe`), its summary row and its hosts."""
    return RECENT.get((store.home, "job", name), lambda: _job(store, name))


def _job(store: Store, name: str) -> dict:
    from shipyard.control.billing import prices
    from shipyard.control.describe import describe_record, summary
    from shipyard.control.reconcile import reconcile

    record = reconcile(store, name)
    return {"job": summary(store, record, store.attempts(name), prices()), "hosts": record.spec.hosts,
            "describe": describe_record(store, record)}


@router.get("/jobs/{name}/attempts")
def attempts(store: Reader, name: str) -> list[dict]:
    store.get_job(name)
    return store.attempts(name)


@router.get("/jobs/{name}/events")
def events(store: Reader, name: str, kind: str | None = None,
           after: Annotated[int, Query(ge=0, description="The last event id already seen")] = 0) -> list[dict]:
    def read() -> list[dict]:
        store.get_job(name)
        return store.events(name, kind, after)
    return RECENT.get((store.home, "events", name, kind, after), read)


@router.get("/jobs/{name}/metrics")
def metrics(store: Reader, name: str, metric: str | None = None,
            points: Annotated[int, Query(ge=2, le=100_000)] = POINTS) -> dict:
    """Each metric's values over time, per host: {metric: {host: [[timestamp, value], ...]}}, each series
    thinned evenly to at most `points` (its last value always kept)."""
    return RECENT.get((store.home, "metrics", name, metric, points), lambda: _metrics(store, name, metric, points))


def _metrics(store: Store, name: str, metric: str | None, points: int) -> dict:
    record = store.get_job(name)
    series: dict[str, dict[str, list]] = {}
    for point in store.metrics(name, metric):
        series.setdefault(point["name"], {}).setdefault(point["host"], []).append([point["ts"], point["value"]])
    return {"training_start_time": record.training_start_time,
            "metrics": {m: {h: thinned(values, points) for h, values in hosts.items()} for m, hosts in series.items()}}


def thinned(values: list, points: int) -> list:
    if len(values) <= points:
        return values
    step = (len(values) - 1) / (points - 1)
    return [values[round(i * step)] for i in range(points)]


@router.get("/jobs/{name}/system")
def system(store: Reader, name: str, points: Annotated[int, Query(ge=2, le=100_000)] = POINTS) -> dict:
    """The profiler's system metrics per instance: CPU (the mean of its cores), memory, each GPU's
    utilisation, network; {host: {series: [[timestamp, value], ...]}}. Empty without profiling."""
    return RECENT.get((store.home, "system", name, points), lambda: _system(store, name, points))


def _system(store: Store, name: str, points: int) -> dict:
    from shipyard.rules.profiler.data import ProfilerReader

    spec = store.get_job(name).spec
    if spec.profiler_config is None:
        return {"hosts": {}}
    data = ProfilerReader(spec.profiler_config.output_uri(spec.output_path, spec.job_name)).read(operators=False)
    hosts = {}
    for node in data.nodes:
        cpus = data.series(node, "cpu", "CPUUtilization")
        out = {"cpu": _mean(cpus.values())} if cpus else {}
        out.update({"memory": v for v in data.series(node, "memory", "").values()})
        out.update(data.series(node, "gpu", "GPUUtilization"))
        out.update({f"network {k}": v for k, v in data.series(node, "network", "Algorithm").items()})
        hosts[node] = {key: thinned([list(p) for p in values], points) for key, values in out.items()}
    return {"hosts": hosts}


def _mean(series) -> list[tuple[float, float]]:
    """Cores sampled together: the mean at each timestamp."""
    by_time: dict[float, list[float]] = {}
    for values in series:
        for ts, value in values:
            by_time.setdefault(ts, []).append(value)
    return [(ts, round(sum(v) / len(v), 2)) for ts, v in sorted(by_time.items())]


@router.get("/jobs/{name}/rules")
def rules(store: Reader, name: str) -> list[dict]:
    """Every rule the job was given, with its evaluation status and findings (Pending until evaluated)."""
    return RECENT.get((store.home, "rules", name), lambda: _rules(store, name))


def _rules(store: Store, name: str) -> list[dict]:
    spec = store.get_job(name).spec
    found = {(kind, s["rule"]): s for kind in ("debugger", "profiler") for s in store.rule_statuses(name, kind)}
    configured = [(r.kind, r.name) for r in spec.rules]
    extra = [key for key in found if key not in configured]   # e.g. rules removed by disable_profiling()
    return [{"kind": kind, "rule": rule, "status": found.get((kind, rule), {}).get("status", "Pending"),
             "details": found.get((kind, rule), {}).get("details", ""),
             "last_modified": found.get((kind, rule), {}).get("last_modified")}
            for kind, rule in configured + extra]


@router.get("/jobs/{name}/report", response_class=HTMLResponse)
def report(store: Reader, name: str) -> HTMLResponse:
    """The profiling report (as `shipyard report` writes it), made now from what was recorded."""
    from shipyard.rules.profiler.report import write_report

    html = write_report(store, name).read_text()
    # Our own page, whose one inline part is its style; nothing in it may run or load.
    return HTMLResponse(html, headers={"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                                                                  "img-src data:; frame-ancestors 'self'"})


@router.get("/jobs/{name}/logs")
def log_hosts(store: Reader, name: str) -> list[dict]:
    """The job's hosts and the size of each one's log."""
    record = store.get_job(name)
    return [{"host": host, "bytes": _size(store.log_path(name, host))} for host in record.spec.hosts]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _log_path(store: Store, name: str, host: str) -> tuple[JobRecord, Path]:
    """The job, and the log of one of its hosts, by name: no other path is reachable."""
    from shipyard.errors import unknown_name_error

    record = store.get_job(name)
    if host not in record.spec.hosts:
        raise unknown_name_error("host", host, record.spec.hosts)
    return record, store.log_path(name, host)


def read_lines(path: Path, offset: int, final: bool, limit: int = LOG_PAGE_BYTES) -> tuple[list[str], int]:
    """Complete lines from `offset` (the last partial one too when `final`), at most `limit` bytes; the
    offset to read from next."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(limit + 1)
    except FileNotFoundError:
        return [], offset
    if len(data) > limit:
        data, final = data[:limit], False
    end = len(data) if final else data.rfind(b"\n") + 1
    if end == 0 and len(data) >= limit:
        end = len(data)    # one line longer than a page: shown in pieces
    return data[:end].decode(errors="replace").splitlines(), offset + end


@router.get("/jobs/{name}/logs/{host}")
def log_lines(store: Reader, name: str, host: str, offset: Annotated[int, Query(ge=0)] = 0,
              search: Annotated[str | None, Query(description="Only lines containing this")] = None,
              tail: Annotated[int | None, Query(ge=1, le=100_000, description="Only the last N lines")] = None) -> dict:
    """A page of the host's log lines from `offset`, and the offset of the next page."""
    record, path = _log_path(store, name, host)
    if tail is not None:
        offset = max(0, _size(path) - LOG_PAGE_BYTES)
    lines, next_offset = read_lines(path, offset, final=record.terminal)
    if tail is not None and offset:
        lines = lines[1:]   # the first line of a window may be cut
    if search:
        lines = [line for line in lines if search in line]
    return {"lines": lines[-tail:] if tail else lines, "offset": next_offset, "size": _size(path)}


@router.get("/jobs/{name}/logs/{host}/stream")
async def log_stream(store: Reader, name: str, host: str, offset: Annotated[int, Query(ge=0)] = 0):
    """Server-sent events: `data:` a JSON list of new lines as they are written, then `event: end` once the
    job has ended and its log was read to the end. `id:` is the offset to resume from."""
    _, path = _log_path(store, name, host)

    async def events():
        position = offset
        while True:
            # The status is read before the file, so lines written before the end are all sent.
            done = await asyncio.to_thread(RECENT.get, (store.home, "status", name), lambda: store.status(name)) \
                in TERMINAL_STATUSES
            lines, position = read_lines(path, position, final=done)
            if lines:
                yield f"id: {position}\ndata: {json.dumps(lines)}\n\n"
            elif done:
                yield f"id: {position}\nevent: end\ndata: {json.dumps(store.status(name))}\n\n"
                return
            else:
                yield ": waiting\n\n"    # a comment: tells a proxy and the client the stream is alive
                await asyncio.sleep(STREAM_POLL_SECONDS)

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


@router.post("/jobs", status_code=201)
def submit(store: Writer, job_file: Annotated[str, Body(description="A job file's YAML, as `shipyard run JOB.yaml` reads")],
           directory: Annotated[str | None, Body(description="What relative paths in it are relative to "
                                                             "(default: the server's working directory)")] = None,
           job_name: Annotated[str | None, Body()] = None) -> dict:
    """Submit a job file; the job starts as `shipyard run JOB.yaml --detach` starts it."""
    from shipyard.cli import jobfile
    from shipyard.errors import ValidationError

    base = Path(directory or ".").expanduser().resolve()
    if not base.is_dir():
        raise ValidationError("directory", directory, "must be an existing directory on the server's machine")
    request = jobfile.loads(job_file, "job_file", base)
    estimator = jobfile.make_estimator(request)
    estimator.fit(jobfile.fit_inputs(request), wait=False, job_name=job_name or request.job_name, logs=False)
    name = estimator.latest_training_job.name
    return {"name": name, "status": store.status(name)}


@router.post("/jobs/{name}/stop")
def stop(store: Writer, name: str) -> dict:
    """Stop the job (SIGTERM, SIGKILL after its grace period), as `shipyard stop`."""
    from shipyard.control.reconcile import stop as stop_job

    stop_job(store, name)
    return {"name": name, "status": store.get_job(name).status, "stop_requested": True}
