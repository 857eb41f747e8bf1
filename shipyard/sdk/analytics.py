"""SageMaker's `TrainingJobAnalytics`: a training job's metrics over time as a pandas frame, read from the
store the controller fills from the job's log lines (its metric_definitions)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from shipyard.errors import ValidationError, unknown_name_error

COLUMNS = ["timestamp", "metric_name", "value"]


class TrainingJobAnalytics:
    """`dataframe()` has a row per value: `timestamp` (seconds since the job started training), `metric_name`
    and `value`, each metric's rows in time order, the metrics in `metric_names` order (default: the job's
    metric definitions). As SageMaker's, the values are algo-1's (CloudWatch's Host dimension there). With
    `period` (seconds) the values are averaged per period, as CloudWatch's statistics are; without it every
    value the logs gave is a row. `start_time`/`end_time` (datetimes) keep the values between them."""

    def __init__(self, training_job_name: str, metric_names: list[str] | None = None, sagemaker_session: Any = None,
                 start_time: dt.datetime | None = None, end_time: dt.datetime | None = None,
                 period: int | None = None) -> None:
        from shipyard.control.reconcile import reconcile
        from shipyard.store import Store

        self._store = Store()
        self.name = training_job_name
        self._record = reconcile(self._store, training_job_name)
        defined = [m.name for m in self._record.spec.metric_definitions]
        for name in metric_names or ():
            if name not in defined:
                raise unknown_name_error("metric_names", name, defined or ["(the job defines no metrics)"])
        if period is not None and (not isinstance(period, int) or period < 1):
            raise ValidationError("period", period, "give the aggregation period in whole seconds, e.g. 60")
        self._metric_names = list(metric_names or defined)
        self._start, self._end, self._period = start_time, end_time, period
        self._dataframe = None

    def dataframe(self, force_refresh: bool = False):
        import pandas as pd

        if self._dataframe is None or force_refresh:
            self._dataframe = pd.DataFrame(self._rows(), columns=COLUMNS)
        return self._dataframe

    def export_csv(self, filename: str) -> None:
        self.dataframe().to_csv(filename)

    def _rows(self) -> list[tuple[float, str, float]]:
        record = self._record
        points = [p for p in self._store.metrics(self.name) if p["host"] == record.spec.hosts[0]]
        began = record.training_start_time or record.creation_time
        low = self._start.timestamp() if self._start else float("-inf")
        high = self._end.timestamp() if self._end else float("inf")
        rows = []
        for metric in self._metric_names:
            series = [(p["ts"] - began, p["value"]) for p in points
                      if p["name"] == metric and low <= p["ts"] <= high]
            if self._period:
                buckets: dict[float, list[float]] = {}
                for elapsed, value in series:
                    buckets.setdefault(elapsed // self._period * self._period, []).append(value)
                series = [(start, sum(values) / len(values)) for start, values in buckets.items()]
            rows += [(elapsed, metric, value) for elapsed, value in sorted(series)]
        return rows
