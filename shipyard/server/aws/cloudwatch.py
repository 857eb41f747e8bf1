"""CloudWatch metrics (signing name "monitoring") over the metrics the store keeps: what the sagemaker SDK's
TrainingJobAnalytics reads (GetMetricStatistics) and what the console lists and charts (ListMetrics,
GetMetricData).

Each metric of a job is in the namespace /aws/sagemaker/TrainingJobs twice, as SageMaker publishes it: per host
(the dimension Host = `<job>/algo-1`) and over all its hosts (TrainingJobName = `<job>`). As in CloudWatch, a
query names a metric by its exact dimensions; statistics are taken over buckets of Period seconds from StartTime,
rounded down as CloudWatch rounds a recent one: to a whole minute, or for a high-resolution period to a multiple
of it."""

from __future__ import annotations

import base64
import datetime
import math
import re
import time
from collections.abc import Callable

from shipyard.server.aws.protocol import AwsError, Call
from shipyard.store import Store

NAMESPACE = "/aws/sagemaker/TrainingJobs"
STATISTICS: dict[str, Callable[[list[float]], float]] = {
    "SampleCount": lambda values: float(len(values)),
    "Average": lambda values: sum(values) / len(values),
    "Sum": lambda values: float(sum(values)),
    "Minimum": lambda values: float(min(values)),
    "Maximum": lambda values: float(max(values)),
}
HIGH_RESOLUTION = (1, 5, 10, 30)   # periods under a minute CloudWatch accepts
MAX_DATAPOINTS = 1440              # GetMetricStatistics' most per call
MAX_QUERIES = 500                  # GetMetricData's most per call
LISTED_JOBS = 500                  # ListMetrics without a job in its filters: the newest jobs'
LIST_PAGE = 500                    # ListMetrics' page, as CloudWatch's
RECENT_SECONDS = 3 * 3600          # RecentlyActive=PT3H
QUERY_ID = re.compile(r"[a-z][a-zA-Z0-9_]*")


def _value_error(message: str) -> AwsError:
    return AwsError("InvalidParameterValue", message)


def _required(params: dict, *members: str) -> None:
    for member in members:
        if params.get(member) in (None, "", []):
            raise AwsError("MissingParameter", f"The parameter {member} is required.")


def _seconds(value: object, member: str) -> float:
    """A timestamp member (the protocol layer makes every one an aware datetime) in epoch seconds."""
    if not isinstance(value, datetime.datetime):
        raise _value_error(f"The parameter {member} must be a timestamp.")
    return value.timestamp()


def _instant(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)


def _period(value: object, member: str = "Period") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _value_error(f"The parameter {member} must be greater than 0.")
    if value % 60 and value not in HIGH_RESOLUTION:
        raise _value_error(f"The parameter {member} must be 1, 5, 10, 30 or a multiple of 60.")
    return value


def _window(params: dict) -> tuple[float, float]:
    """StartTime and EndTime in epoch seconds."""
    _required(params, "StartTime", "EndTime")
    start, end = _seconds(params["StartTime"], "StartTime"), _seconds(params["EndTime"], "EndTime")
    if start >= end:
        raise _value_error("The parameter StartTime must be less than the parameter EndTime.")
    return start, end


def _rounded(start: float, period: int) -> float:
    """Where the first bucket starts: StartTime rounded down to a whole minute, or to a multiple of a
    high-resolution period."""
    step = 60 if period % 60 == 0 else period
    return float(math.floor(start / step) * step)


def _points(store: Store, namespace: str | None, metric: str | None, dimensions: list[dict] | None,
            unit: str | None) -> list[tuple]:
    """(epoch seconds, value) of the metric named by exactly these dimensions; none for any other namespace,
    dimensions or unit (ours have none), as CloudWatch answers for a metric it does not have."""
    if namespace != NAMESPACE or not metric or len(dimensions or ()) != 1 or unit not in (None, "None"):
        return []
    name, value = dimensions[0].get("Name"), dimensions[0].get("Value")
    if name == "TrainingJobName":
        job, host = value, None
    elif name == "Host":
        job, _, host = (value or "").partition("/")
    else:
        return []
    if not job or not store.exists(job):
        return []
    return [(p["ts"], p["value"]) for p in store.metrics(job, metric) if host is None or p["host"] == host]


def _buckets(points: list[tuple], start: float, end: float, period: int) -> dict[float, list[float]]:
    """The values of each bucket [start + k*period, + period) that holds any, by its start."""
    found: dict[float, list[float]] = {}
    for ts, value in points:
        if start <= ts < end:
            found.setdefault(start + (ts - start) // period * period, []).append(value)
    return dict(sorted(found.items()))


def _statistic(name: object, member: str) -> Callable[[list[float]], float]:
    if name not in STATISTICS:
        raise _value_error(f"The value {name} for parameter {member} is not a valid statistic; use one of "
                           f"{', '.join(STATISTICS)} (percentiles and other extended statistics are not supported "
                           "by shipyard).")
    return STATISTICS[name]


def get_metric_statistics(call: Call, params: dict) -> dict:
    _required(params, "Namespace", "MetricName", "Period")
    if params.get("ExtendedStatistics"):
        raise _value_error("ExtendedStatistics (percentiles) are not supported by shipyard; ask for Statistics.")
    if not params.get("Statistics"):
        raise AwsError("MissingParameter", "At least one of the parameters Statistics and ExtendedStatistics must "
                                           "be specified.")
    statistics = {name: _statistic(name, "Statistics") for name in params["Statistics"]}
    period = _period(params["Period"])
    start, end = _window(params)
    start = _rounded(start, period)
    requested = math.ceil((end - start) / period)
    if requested > MAX_DATAPOINTS:
        raise AwsError("InvalidParameterCombination",
                       f"You have requested up to {requested:,} datapoints, which exceeds the limit of "
                       f"{MAX_DATAPOINTS:,}. You may reduce the datapoints requested by increasing Period, or "
                       "decreasing the time range.")
    points = _points(call.store, params["Namespace"], params["MetricName"], params.get("Dimensions"),
                     params.get("Unit"))
    return {"Label": params["MetricName"],
            "Datapoints": [{"Timestamp": _instant(at), **{name: f(values) for name, f in statistics.items()},
                            "Unit": "None"} for at, values in _buckets(points, start, end, period).items()]}


def get_metric_data(call: Call, params: dict) -> dict:
    queries = params.get("MetricDataQueries") or []
    _required(params, "MetricDataQueries")
    if len(queries) > MAX_QUERIES:
        raise _value_error(f"The collection MetricDataQueries must not have a size greater than {MAX_QUERIES}.")
    ids = [q.get("Id") for q in queries]
    if len(set(ids)) < len(ids):
        raise _value_error("The values for parameter Id in MetricDataQueries are not unique.")
    scan = params.get("ScanBy") or "TimestampDescending"
    if scan not in ("TimestampDescending", "TimestampAscending"):
        raise _value_error(f"The value {scan} for parameter ScanBy is not valid.")
    start, end = _window(params)
    results = []
    for number, query in enumerate(queries, 1):
        member = f"MetricDataQueries.member.{number}"
        if not isinstance(query.get("Id"), str) or not QUERY_ID.fullmatch(query["Id"]):
            raise _value_error(f"The value {query.get('Id')} for parameter {member}.Id is not valid: it must start "
                               "with a lowercase letter and hold only letters, digits and underscores.")
        if query.get("Expression") is not None:
            raise _value_error(f"The parameter {member}.Expression: metric math and search expressions are not "
                               "supported by shipyard; ask for a MetricStat.")
        stat = query.get("MetricStat")
        if stat is None:
            raise AwsError("MissingParameter", f"The parameter {member}.MetricStat is required.")
        if query.get("ReturnData") is False:
            continue
        period = _period(stat.get("Period"), f"{member}.MetricStat.Period")
        statistic = _statistic(stat.get("Stat"), f"{member}.MetricStat.Stat")
        metric = stat.get("Metric") or {}
        points = _points(call.store, metric.get("Namespace"), metric.get("MetricName"), metric.get("Dimensions"),
                         stat.get("Unit"))
        series = sorted(_buckets(points, _rounded(start, period), end, period).items(),
                        reverse=scan == "TimestampDescending")
        results.append({"Id": query["Id"], "Label": query.get("Label") or metric.get("MetricName"),
                        "Timestamps": [_instant(at) for at, _ in series],
                        "Values": [statistic(values) for _, values in series], "StatusCode": "Complete"})
    return {"MetricDataResults": results}


def list_metrics(call: Call, params: dict) -> dict:
    """The jobs' metrics matching the filters: those of the job a dimension filter names, or of the newest jobs."""
    if params.get("Namespace") not in (None, NAMESPACE):
        return {"Metrics": []}
    recent = params.get("RecentlyActive")
    if recent not in (None, "PT3H"):
        raise _value_error(f"The value {recent} for parameter RecentlyActive is not valid; use PT3H.")
    filters = params.get("Dimensions") or []
    jobs = {_job_of(f) for f in filters} - {None}
    records = ([call.store.get_job(job) for job in sorted(jobs) if call.store.exists(job)] if jobs
               else call.store.list_jobs(limit=LISTED_JOBS))
    since = None if recent is None else time.time() - RECENT_SECONDS
    metrics = []
    for record in records:
        for name, hosts in sorted(call.store.metric_series(record.name, params.get("MetricName"), since).items()):
            dimensions = [[{"Name": "TrainingJobName", "Value": record.name}]] + \
                [[{"Name": "Host", "Value": f"{record.name}/{host}"}] for host in sorted(hosts)]
            metrics += [{"Namespace": NAMESPACE, "MetricName": name, "Dimensions": d} for d in dimensions
                        if all(_matches(d, f) for f in filters)]
    start = _page_start(params.get("NextToken"))
    following = start + LIST_PAGE
    return {"Metrics": metrics[start:following],
            "NextToken": base64.urlsafe_b64encode(str(following).encode()).decode() if following < len(metrics)
            else None}


def _job_of(wanted: dict) -> str | None:
    """The job a dimension filter names, if any."""
    value = wanted.get("Value")
    if not value or wanted.get("Name") not in ("TrainingJobName", "Host"):
        return None
    return value if wanted["Name"] == "TrainingJobName" else value.partition("/")[0]


def _matches(dimensions: list[dict], wanted: dict) -> bool:
    return any(d["Name"] == wanted.get("Name") and wanted.get("Value") in (None, d["Value"]) for d in dimensions)


def _page_start(token: str | None) -> int:
    if token is None:
        return 0
    try:
        start = int(base64.urlsafe_b64decode(token.encode()).decode())
    except ValueError:
        start = -1
    if start < 0:
        raise AwsError("InvalidNextToken", "The specified NextToken is not valid.")
    return start


OPERATIONS = {
    "GetMetricStatistics": get_metric_statistics,
    "GetMetricData": get_metric_data,
    "ListMetrics": list_metrics,
}
