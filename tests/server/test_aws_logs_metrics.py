"""CloudWatch Logs and CloudWatch metrics over the store (shipyard/server/aws/logs.py, cloudwatch.py): the
operations called directly over jobs whose logs and metrics the test writes (every answer checked against
botocore's output shape), then real boto3 clients against a real `shipyard server` over a real 2-instance job,
read the way the sagemaker SDK reads it (DescribeLogStreams, GetLogEvents resumed by time and skip while the job
writes, GetMetricStatistics by TrainingJobName)."""

from __future__ import annotations

import datetime
import json
import threading
from pathlib import Path

import pytest

from shipyard.server.aws import cloudwatch, logs
from shipyard.server.aws.protocol import AwsError
from shipyard.spec.job import JobSpec
from shipyard.store import Store
from tests.server.aws_shapes import answered

GROUP = "/aws/sagemaker/TrainingJobs"
SCRIPTS = Path(__file__).parent / "scripts"
UTC = datetime.timezone.utc


# -- helpers ------------------------------------------------------------------------------------------------------
def call(store: Store, operation: str, **params) -> dict:
    """The operation as the protocol layer calls it; its answer (less the members it drops) must fit botocore's
    output shape."""
    service, module = ("logs", logs) if operation in logs.OPERATIONS else ("monitoring", cloudwatch)
    return answered(module, service, operation, store, **params)


def refused(code: str, store: Store, operation: str, **params) -> str:
    with pytest.raises(AwsError) as error:
        call(store, operation, **params)
    assert error.value.code == code, error.value
    return error.value.message


def new_job(store: Store, name: str, hosts: int = 2) -> str:
    store.create_job(JobSpec(job_name=name, instance_count=hosts, output_path="file:///out",
                             hyperparameters={"sagemaker_program": '"t.py"'}))
    return name


def write(store: Store, job: str, host: str, text: str) -> None:
    path = store.log_path(job, host)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(text)


def stream_name(store: Store, job: str, host: str) -> str:
    return f"{job}/{host}-{int(store.get_job(job).creation_time)}"


def events(store: Store, stream: str, **params) -> list[dict]:
    """Every event of the stream from its head, page by page as the SDK reads (until a page is empty)."""
    found, token = [], None
    while True:
        page = call(store, "GetLogEvents", logGroupName=GROUP, logStreamName=stream, startFromHead=True,
                    **({"nextToken": token} if token else {}), **params)
        if not page["events"]:
            assert page["nextForwardToken"] == (token or page["nextForwardToken"])   # the end: the same token
            return found
        found += page["events"]
        token = page["nextForwardToken"]


def every_page(store: Store, operation: str, member: str, **params) -> list[dict]:
    """`member`'s items over every page, following nextToken until a page has none."""
    found, token = [], None
    while True:
        page = call(store, operation, **params, **({"nextToken": token} if token else {}))
        found += page[member]
        if "nextToken" not in page:
            return found
        token = page["nextToken"]


def sdk_read(read_page, streams: list[str], positions: dict) -> list[tuple[str, str]]:
    """What sagemaker.session._flush_log_streams prints in one poll (sagemaker.logs.log_stream and its positions
    of (timestamp, skip)), as (stream, message); `read_page(stream, startTime, token)` is GetLogEvents."""
    printed = []
    for stream in streams:
        timestamp, skip = positions.get(stream, (0, 0))
        token, count = None, 1
        while count > 0:
            page = read_page(stream, timestamp, token)
            token, got = page["nextForwardToken"], page["events"]
            count = len(got)
            got, skip = (got[skip:], 0) if count > skip else ([], skip - count)
            for event in got:
                printed.append((stream, event["message"]))
                ts, seen = positions.get(stream, (0, 0))
                positions[stream] = (ts, seen + 1) if event["timestamp"] == ts else (event["timestamp"], 1)
    return printed


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path / "home")


# -- CloudWatch Logs ----------------------------------------------------------------------------------------------
def test_streams_are_named_as_sagemaker_names_them_and_listed_by_prefix_order_and_page(store):
    first, second, other = new_job(store, "train-a"), new_job(store, "train-ab", hosts=1), new_job(store, "other")
    for job, host in ((first, "algo-1"), (first, "algo-2"), (second, "algo-1"), (other, "algo-1")):
        write(store, job, host, f"{job} {host}\n")
    answer = call(store, "DescribeLogStreams", logGroupName=GROUP, logStreamNamePrefix=f"{first}/",
                  orderBy="LogStreamName", limit=2)
    created = int(store.get_job(first).creation_time)
    assert [s["logStreamName"] for s in answer["logStreams"]] == [f"train-a/algo-1-{created}",
                                                                  f"train-a/algo-2-{created}"]
    assert "nextToken" not in answer   # the SDK asks again with the same arguments while there is one
    row = answer["logStreams"][0]
    assert row["arn"] == f"arn:aws:logs:us-east-1:000000000000:log-group:{GROUP}:log-stream:{row['logStreamName']}"
    assert row["creationTime"] <= row["firstEventTimestamp"] == row["lastEventTimestamp"] == row["lastIngestionTime"]
    assert row["storedBytes"] == 0
    by_prefix = call(store, "DescribeLogStreams", logGroupName=GROUP, logStreamNamePrefix="train-a")["logStreams"]
    assert [s["logStreamName"].split("/")[0] for s in by_prefix] == [first, first, second]
    pages = [s["logStreamName"] for s in every_page(store, "DescribeLogStreams", "logStreams",
                                                    logGroupIdentifier=GROUP, descending=True, limit=1)]
    assert pages == sorted(pages, reverse=True) and len(pages) == 4
    newest = call(store, "DescribeLogStreams", logGroupName=GROUP, orderBy="LastEventTime", descending=True)
    assert len(newest["logStreams"]) == 4
    assert call(store, "DescribeLogStreams", logGroupName=GROUP, logStreamNamePrefix="nope/")["logStreams"] == []
    assert call(store, "DescribeLogStreams", logGroupName=GROUP, logStreamNamePrefix="../")["logStreams"] == []
    assert refused("ResourceNotFoundException", store, "DescribeLogStreams",
                   logGroupName="/aws/sagemaker/ProcessingJobs") == "The specified log group does not exist."
    refused("InvalidParameterException", store, "DescribeLogStreams", logGroupName=GROUP, orderBy="LastEventTime",
            logStreamNamePrefix="train")
    refused("InvalidParameterException", store, "DescribeLogStreams", logGroupName=GROUP, limit=51)
    refused("InvalidParameterException", store, "DescribeLogStreams", logGroupName=GROUP, nextToken="not-a-token")


def test_a_host_without_a_log_has_no_stream_yet(store):
    job = new_job(store, "quiet")
    write(store, job, "algo-2", "only the second host wrote\n")
    rows = call(store, "DescribeLogStreams", logGroupName=GROUP, logStreamNamePrefix=f"{job}/")["logStreams"]
    assert [r["logStreamName"] for r in rows] == [stream_name(store, job, "algo-2")]
    assert refused("ResourceNotFoundException", store, "GetLogEvents", logGroupName=GROUP,
                   logStreamName=stream_name(store, job, "algo-1")) == "The specified log stream does not exist."


def test_events_are_the_lines_in_order_with_times_that_stay_and_the_end_returns_the_token_passed(store):
    job = new_job(store, "lines")
    lines = [f"line {i} é" for i in range(50)] + ["", "last"]
    write(store, job, "algo-1", "\n".join(lines) + "\n")
    stream = stream_name(store, job, "algo-1")
    first = events(store, stream)
    assert [e["message"] for e in first] == lines
    assert all(e["timestamp"] == e["ingestionTime"] for e in first)
    assert events(store, stream) == first   # the same times on a later call
    paged = events(store, stream, limit=7)
    assert paged == first
    end = call(store, "GetLogEvents", logGroupName=GROUP, logStreamName=stream, startFromHead=True,
               nextToken=call(store, "GetLogEvents", logGroupName=GROUP, logStreamName=stream,
                              startFromHead=True)["nextForwardToken"])
    assert end["events"] == [] and end["nextForwardToken"].startswith("f/")
    marks = store.job_dir(job) / "logs" / "algo-1.log.marks"
    assert len(marks.read_text().splitlines()) == 1   # one read found these lines: one mark


def test_a_running_jobs_partial_line_waits_until_complete_or_the_job_ended(store):
    job = new_job(store, "partial", hosts=1)
    stream = stream_name(store, job, "algo-1")
    write(store, job, "algo-1", "one\ntw")
    assert [e["message"] for e in events(store, stream)] == ["one"]
    write(store, job, "algo-1", "o\nthr")
    assert [e["message"] for e in events(store, stream)] == ["one", "two"]
    store.transition(job, "Completed", "Completed", "done")
    assert [e["message"] for e in events(store, stream)] == ["one", "two", "thr"]


def test_the_tail_by_default_and_back_page_by_page_with_the_backward_token(store):
    job = new_job(store, "tail", hosts=1)
    lines = [f"line {i}" for i in range(25)]
    write(store, job, "algo-1", "".join(f"{line}\n" for line in lines))
    stream = stream_name(store, job, "algo-1")
    page = call(store, "GetLogEvents", logGroupName=GROUP, logStreamName=stream, limit=10)
    assert [e["message"] for e in page["events"]] == lines[-10:]
    seen = [e["message"] for e in page["events"]]
    while page["events"]:
        token = page["nextBackwardToken"]
        page = call(store, "GetLogEvents", logGroupName=GROUP, logStreamName=stream, limit=10, nextToken=token)
        seen = [e["message"] for e in page["events"]] + seen
    assert seen == lines and page["nextBackwardToken"] == token   # at the start: the same token
    again = call(store, "GetLogEvents", logGroupName=GROUP, logStreamName=stream, limit=10)
    assert call(store, "GetLogEvents", logGroupName=GROUP, logStreamName=stream,
                nextToken=again["nextForwardToken"])["events"] == []


def test_start_and_end_times_select_the_lines_seen_between(store, monkeypatch):
    job = new_job(store, "window", hosts=1)
    stream = stream_name(store, job, "algo-1")
    for second, text in ((100, "a\nb\n"), (200, "c\n"), (300, "d\ne\n")):
        monkeypatch.setattr(logs.time, "time", lambda second=second: second + 10**6)
        write(store, job, "algo-1", text)
        events(store, stream)
    all_events = events(store, stream)
    assert [(e["message"], e["timestamp"]) for e in all_events] == \
        [("a", 1_000_100_000), ("b", 1_000_100_000), ("c", 1_000_200_000), ("d", 1_000_300_000),
         ("e", 1_000_300_000)]
    between = events(store, stream, startTime=1_000_100_001, endTime=1_000_300_000)
    assert [e["message"] for e in between] == ["c"]
    assert [e["message"] for e in events(store, stream, startTime=1_000_300_000)] == ["d", "e"]


def test_a_log_first_read_after_it_was_written_gets_the_time_of_its_last_write(store):
    import os

    job = new_job(store, "late", hosts=1)
    write(store, job, "algo-1", "old\n")
    os.utime(store.log_path(job, "algo-1"), (1_500_000_000, 1_500_000_000))
    assert [e["timestamp"] for e in events(store, stream_name(store, job, "algo-1"))] == [1_500_000_000_000]


def test_the_sdks_resume_by_time_and_skip_loses_and_repeats_nothing_while_the_log_grows(store, monkeypatch):
    """Lines seen in the same millisecond share a time: the SDK's skip count must still land on the next."""
    job = new_job(store, "growing")
    monkeypatch.setattr(logs.time, "time", lambda: 1_700_000_000.0)   # every read in one millisecond
    streams = [stream_name(store, job, host) for host in ("algo-1", "algo-2")]

    def read_page(stream, start, token):
        return call(store, "GetLogEvents", logGroupName=GROUP, logStreamName=stream, startTime=start,
                    startFromHead=True, **({"nextToken": token} if token else {}))

    positions, printed, written = {}, [], {s: [] for s in streams}
    for poll in range(6):
        for host, stream in zip(("algo-1", "algo-2"), streams):
            new = [f"{host} poll {poll} line {i}" for i in range(poll + 1)]
            write(store, job, host, "".join(f"{line}\n" for line in new) + ("cut " if poll == 2 else ""))
            written[stream] += new
        printed += sdk_read(read_page, streams, positions)
    store.transition(job, "Completed", "Completed", "done")
    printed += sdk_read(read_page, streams, positions)
    for stream in streams:
        mine = [message for name, message in printed if name == stream]
        whole = store.log_path(job, stream.split("/")[1].rsplit("-", 1)[0]).read_text().splitlines()
        assert mine == whole and len(mine) == len(written[stream])   # "cut " joined the next poll's first line


def test_threads_reading_new_lines_together_mark_them_once(store):
    job = new_job(store, "threads", hosts=1)
    stream = stream_name(store, job, "algo-1")
    write(store, job, "algo-1", "".join(f"line {i}\n" for i in range(1000)))
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(events(store, stream))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 8 and all(answer == answers[0] for answer in answers)
    assert len((store.job_dir(job) / "logs" / "algo-1.log.marks").read_text().splitlines()) == 1


def test_pages_cut_at_their_size_lose_nothing_either_way_and_a_line_longer_than_a_page_comes_in_pieces(
        store, monkeypatch):
    monkeypatch.setattr(logs, "PAGE_BYTES", 16)
    job = new_job(store, "small-pages", hosts=1)
    lines = [f"l{i}" * (i % 4 + 1) for i in range(20)]
    write(store, job, "algo-1", "".join(f"{line}\n" for line in lines))
    stream = stream_name(store, job, "algo-1")
    assert [e["message"] for e in events(store, stream)] == lines
    page = call(store, "GetLogEvents", logGroupName=GROUP, logStreamName=stream)
    backward = [e["message"] for e in page["events"]]
    while page["events"]:
        page = call(store, "GetLogEvents", logGroupName=GROUP, logStreamName=stream,
                    nextToken=page["nextBackwardToken"])
        backward = [e["message"] for e in page["events"]] + backward
    assert backward == lines
    write(store, job, "algo-1", "x" * 40 + "\nend\n")
    assert [e["message"] for e in events(store, stream)][len(lines):] == ["x" * 16, "x" * 16, "x" * 8, "end"]


def test_the_index_survives_a_mark_a_crash_cut_short(store):
    job = new_job(store, "crashed", hosts=1)
    stream = stream_name(store, job, "algo-1")
    write(store, job, "algo-1", "one\ntwo\n")
    before = events(store, stream)
    marks = store.job_dir(job) / "logs" / "algo-1.log.marks"
    with open(marks, "a") as f:
        f.write("17 12")   # the server died writing a mark
    write(store, job, "algo-1", "three\n")
    after = events(store, stream)
    assert after[:2] == before and [e["message"] for e in after] == ["one", "two", "three"]
    assert after[2]["timestamp"] >= before[1]["timestamp"]
    assert events(store, stream) == after and len(marks.read_text().splitlines()) == 3


def test_a_stream_name_reaches_nothing_but_a_hosts_log(store):
    job = new_job(store, "safe", hosts=1)
    write(store, job, "algo-1", "x\n")
    created = int(store.get_job(job).creation_time)
    for name in (f"{job}/algo-2-{created}", f"{job}/algo-1-{created + 1}", f"../{job}/algo-1-{created}",
                 f"{job}/../../shipyard.db-{created}", f"{job}/algo-1.log.marks-{created}", "", "/"):
        refused("ResourceNotFoundException", store, "GetLogEvents", logGroupName=GROUP, logStreamName=name)
    for token in ("x", "f/-1", "f/../x", "c/1"):
        refused("InvalidParameterException", store, "GetLogEvents", logGroupName=GROUP,
                logStreamName=stream_name(store, job, "algo-1"), nextToken=token)
    refused("InvalidParameterException", store, "GetLogEvents", logGroupName=GROUP,
            logStreamName=stream_name(store, job, "algo-1"), limit=10_001)
    refused("InvalidParameterException", store, "GetLogEvents", logGroupName=GROUP, logGroupIdentifier=GROUP,
            logStreamName=stream_name(store, job, "algo-1"))


def test_filter_matches_plain_terms_across_streams_in_time_order_and_pages(store, monkeypatch):
    job = new_job(store, "filter")
    for second, host, text in ((1, "algo-1", "step 0 loss=1.0\nnoise\n"), (2, "algo-2", "step 0 loss=2.0\n"),
                               (3, "algo-1", "step 1 loss=0.5\nERROR disk full\n")):
        monkeypatch.setattr(logs.time, "time", lambda second=second: 1_700_000_000 + second)
        write(store, job, host, text)
        call(store, "DescribeLogStreams", logGroupName=GROUP, logStreamNamePrefix=f"{job}/")   # marks them
    found = call(store, "FilterLogEvents", logGroupName=GROUP, logStreamNamePrefix=f"{job}/", filterPattern="loss=")
    assert [(e["logStreamName"].split("/")[1][:6], e["message"]) for e in found["events"]] == \
        [("algo-1", "step 0 loss=1.0"), ("algo-2", "step 0 loss=2.0"), ("algo-1", "step 1 loss=0.5")]
    assert len({e["eventId"] for e in found["events"]}) == 3 and "nextToken" not in found
    phrase = call(store, "FilterLogEvents", logGroupName=GROUP, filterPattern='"disk full" ERROR',
                  logStreamNames=[stream_name(store, job, "algo-1"), stream_name(store, job, "algo-9")])
    assert [e["message"] for e in phrase["events"]] == ["ERROR disk full"]
    one_by_one = [e["message"] for e in every_page(store, "FilterLogEvents", "events", logGroupName=GROUP,
                                                   logStreamNamePrefix=job, limit=1)]
    assert one_by_one == ["step 0 loss=1.0", "noise", "step 0 loss=2.0", "step 1 loss=0.5", "ERROR disk full"]
    monkeypatch.setattr(logs, "SCAN_BYTES", 1)    # each call reads a page of each stream only
    monkeypatch.setattr(logs, "PAGE_BYTES", 16)   # a line or two
    scanned = [e["message"] for e in every_page(store, "FilterLogEvents", "events", logGroupName=GROUP,
                                                logStreamNamePrefix=job)]
    assert scanned == one_by_one
    for pattern, named in (("{ $.level = \"error\" }", "JSON"), ("[ip, user]", "space-delimited"),
                           ("%err.r%", "regular expressions"), ("?ERROR ?WARN", "optional"), ("-noise", "excluded")):
        assert named in refused("InvalidParameterException", store, "FilterLogEvents", logGroupName=GROUP,
                                filterPattern=pattern)
    refused("InvalidParameterException", store, "FilterLogEvents", logGroupName=GROUP, logStreamNamePrefix=job,
            logStreamNames=[stream_name(store, job, "algo-1")])
    for made_up in ("x", logs._cursor([1, 2]), logs._cursor(["a", "b", "c"]), logs._cursor({"a": 1})):
        refused("InvalidParameterException", store, "FilterLogEvents", logGroupName=GROUP, nextToken=made_up)


def test_the_one_log_group(store):
    groups = call(store, "DescribeLogGroups", logGroupNamePrefix="/aws/sagemaker/")["logGroups"]
    assert [g["logGroupName"] for g in groups] == [GROUP]
    assert groups[0]["logGroupArn"] == f"arn:aws:logs:us-east-1:000000000000:log-group:{GROUP}"
    assert call(store, "DescribeLogGroups", logGroupNamePrefix="/aws/lambda")["logGroups"] == []
    assert len(call(store, "DescribeLogGroups", logGroupNamePattern="trainingjobs")["logGroups"]) == 1


# -- CloudWatch metrics -------------------------------------------------------------------------------------------
T0 = 1_700_000_040.0   # a whole minute


@pytest.fixture
def metered(store) -> Store:
    job = new_job(store, "metered")
    store.add_metrics(job, [("loss", "algo-1", T0 + 1, 4.0), ("loss", "algo-2", T0 + 2, 2.0),
                            ("loss", "algo-1", T0 + 61, 1.0), ("loss", "algo-2", T0 + 119, 3.0),
                            ("accuracy", "algo-1", T0 + 5, 0.5)])
    new_job(store, "bare")
    return store


def statistics(store: Store, dimensions: list[dict], **params) -> list[dict]:
    answer = call(store, "GetMetricStatistics", **{
        "Namespace": GROUP, "MetricName": "loss", "Dimensions": dimensions, "StartTime": _at(T0 + 30),
        "EndTime": _at(T0 + 600), "Period": 60, "Statistics": ["Average", "Sum", "Minimum", "Maximum", "SampleCount"],
        **params})
    assert answer["Label"] == params.get("MetricName", "loss")
    return answer["Datapoints"]


def _at(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, UTC)


def test_statistics_per_period_over_all_hosts_or_one(metered):
    job = [{"Name": "TrainingJobName", "Value": "metered"}]
    assert statistics(metered, job) == [   # StartTime T0+30 is rounded down to T0, a whole minute
        {"Timestamp": _at(T0), "Average": 3.0, "Sum": 6.0, "Minimum": 2.0, "Maximum": 4.0, "SampleCount": 2.0,
         "Unit": "None"},
        {"Timestamp": _at(T0 + 60), "Average": 2.0, "Sum": 4.0, "Minimum": 1.0, "Maximum": 3.0, "SampleCount": 2.0,
         "Unit": "None"}]
    host = statistics(metered, [{"Name": "Host", "Value": "metered/algo-2"}], Statistics=["Average"])
    assert host == [{"Timestamp": _at(T0), "Average": 2.0, "Unit": "None"},
                    {"Timestamp": _at(T0 + 60), "Average": 3.0, "Unit": "None"}]
    seconds = statistics(metered, job, Period=1, StartTime=_at(T0 + 1.5), Statistics=["Maximum"])
    assert [p["Timestamp"] for p in seconds] == [_at(T0 + 1), _at(T0 + 2), _at(T0 + 61), _at(T0 + 119)]
    for dimensions in ([], [{"Name": "TrainingJobName", "Value": "bare"}], [{"Name": "Host", "Value": "metered"}],
                       job + [{"Name": "Host", "Value": "metered/algo-1"}], [{"Name": "Other", "Value": "metered"}],
                       job + [{"Name": "TrainingJobName", "Value": "bare"}]):
        assert statistics(metered, dimensions) == []
    assert statistics(metered, job, Unit="Seconds") == [] and statistics(metered, job, Namespace="AWS/EC2") == []


def test_statistics_refuse_what_cloudwatch_refuses(metered):
    job = [{"Name": "TrainingJobName", "Value": "metered"}]
    for period in (0, 7, 61, 90):
        assert "Period" in refused("InvalidParameterValue", metered, "GetMetricStatistics", Namespace=GROUP,
                                   MetricName="loss", Dimensions=job, StartTime=_at(T0), EndTime=_at(T0 + 60),
                                   Period=period, Statistics=["Average"])
    base = {"Namespace": GROUP, "MetricName": "loss", "Dimensions": job, "StartTime": _at(T0),
            "EndTime": _at(T0 + 600), "Period": 60}
    refused("MissingParameter", metered, "GetMetricStatistics", **base)
    assert "ExtendedStatistics" in refused("InvalidParameterValue", metered, "GetMetricStatistics", **base,
                                           ExtendedStatistics=["p99"])
    refused("InvalidParameterValue", metered, "GetMetricStatistics", **base, Statistics=["Median"])
    refused("InvalidParameterValue", metered, "GetMetricStatistics", **{**base, "EndTime": _at(T0)},
            Statistics=["Average"])
    assert "1,440" in refused("InvalidParameterCombination", metered, "GetMetricStatistics",
                              **{**base, "EndTime": _at(T0 + 86_460)}, Statistics=["Average"])
    refused("MissingParameter", metered, "GetMetricStatistics", **{**base, "MetricName": None},
            Statistics=["Average"])


def test_list_metrics_by_job_host_or_name_and_in_pages(metered, monkeypatch):
    def listed(**params):
        return [(m["MetricName"], m["Dimensions"][0]["Name"], m["Dimensions"][0]["Value"])
                for m in call(metered, "ListMetrics", **params)["Metrics"]]

    everything = listed(Namespace=GROUP)
    assert everything == [("accuracy", "TrainingJobName", "metered"), ("accuracy", "Host", "metered/algo-1"),
                          ("loss", "TrainingJobName", "metered"), ("loss", "Host", "metered/algo-1"),
                          ("loss", "Host", "metered/algo-2")]
    assert listed(Dimensions=[{"Name": "TrainingJobName", "Value": "metered"}]) == \
        [("accuracy", "TrainingJobName", "metered"), ("loss", "TrainingJobName", "metered")]
    assert listed(MetricName="loss", Dimensions=[{"Name": "Host"}]) == \
        [("loss", "Host", "metered/algo-1"), ("loss", "Host", "metered/algo-2")]
    assert listed(Dimensions=[{"Name": "Host", "Value": "metered/algo-2"}]) == [("loss", "Host", "metered/algo-2")]
    assert listed(Namespace="AWS/EC2") == [] and listed(Dimensions=[{"Name": "TrainingJobName", "Value": "x"}]) == []
    assert listed(RecentlyActive="PT3H") == []   # the points are from 2023
    monkeypatch.setattr(cloudwatch, "LIST_PAGE", 2)
    first = call(metered, "ListMetrics")
    second = call(metered, "ListMetrics", NextToken=first["NextToken"])
    third = call(metered, "ListMetrics", NextToken=second["NextToken"])
    assert len(first["Metrics"] + second["Metrics"] + third["Metrics"]) == 5 and "NextToken" not in third
    refused("InvalidNextToken", metered, "ListMetrics", NextToken="?")


def test_metric_data_per_query_newest_first_unless_asked(metered):
    def query(id, dimensions, stat="Average", **extra):
        return {"Id": id, "MetricStat": {"Metric": {"Namespace": GROUP, "MetricName": "loss", "Dimensions": dimensions},
                                         "Period": 60, "Stat": stat}, **extra}

    job, host = [{"Name": "TrainingJobName", "Value": "metered"}], [{"Name": "Host", "Value": "metered/algo-1"}]
    answer = call(metered, "GetMetricData", StartTime=_at(T0), EndTime=_at(T0 + 600), MetricDataQueries=[
        query("mean", job), query("low", host, "Minimum", Label="algo-1"), query("hidden", job, ReturnData=False)])
    assert answer["MetricDataResults"] == [
        {"Id": "mean", "Label": "loss", "Timestamps": [_at(T0 + 60), _at(T0)], "Values": [2.0, 3.0],
         "StatusCode": "Complete"},
        {"Id": "low", "Label": "algo-1", "Timestamps": [_at(T0 + 60), _at(T0)], "Values": [1.0, 4.0],
         "StatusCode": "Complete"}]
    ascending = call(metered, "GetMetricData", StartTime=_at(T0), EndTime=_at(T0 + 600), ScanBy="TimestampAscending",
                     MetricDataQueries=[query("mean", job, "SampleCount")])["MetricDataResults"][0]
    assert (ascending["Timestamps"], ascending["Values"]) == ([_at(T0), _at(T0 + 60)], [2.0, 2.0])
    window = {"StartTime": _at(T0), "EndTime": _at(T0 + 600)}
    assert "expressions" in refused("InvalidParameterValue", metered, "GetMetricData", **window,
                                    MetricDataQueries=[{"Id": "e", "Expression": "SUM(METRICS())"}])
    refused("InvalidParameterValue", metered, "GetMetricData", **window, MetricDataQueries=[query("Bad", job)])
    refused("InvalidParameterValue", metered, "GetMetricData", **window, MetricDataQueries=[query("a", job)] * 2)
    refused("InvalidParameterValue", metered, "GetMetricData", **window, MetricDataQueries=[query("a", job, "p90")])


# -- through botocore against a real server over a real job ---------------------------------------------------------
def clients(server):
    import boto3

    info = json.loads(server.info_path.read_text())
    session = boto3.session.Session(aws_access_key_id=info["aws_access_key_id"],
                                    aws_secret_access_key=info["aws_secret_access_key"], region_name="us-east-1")
    return (session.client("logs", endpoint_url=server.url + "/aws"),
            session.client("cloudwatch", endpoint_url=server.url + "/aws"))


@pytest.mark.slow
def test_boto3_reads_a_running_jobs_logs_as_the_sdk_does_and_its_metrics(home, shipyard_server):
    from shipyard.pytorch import PyTorch

    estimator = PyTorch(entry_point="train.py", source_dir=str(SCRIPTS), instance_count=2,
                        distribution={"torch_distributed": {"enabled": True}}, hyperparameters={"steps": 12,
                                                                                                "sleep": 0.3},
                        metric_definitions=[{"Name": "loss", "Regex": r"loss=([0-9.]+)"}])
    estimator.fit(wait=False, logs=False)
    job = estimator.latest_training_job.name
    store = Store(home)
    logs_client, metrics_client = clients(shipyard_server)

    def read_page(stream, start, token):
        return logs_client.get_log_events(logGroupName=GROUP, logStreamName=stream, startTime=start,
                                          startFromHead=True, **({"nextToken": token} if token else {}))

    streams, positions, printed = [], {}, []
    while True:   # _flush_log_streams' loop, polling faster
        ended = store.get_job(job).terminal
        if len(streams) < 2:
            streams = [s["logStreamName"] for s in logs_client.describe_log_streams(
                logGroupName=GROUP, logStreamNamePrefix=job + "/", orderBy="LogStreamName", limit=2)["logStreams"]]
        printed += sdk_read(read_page, streams, positions)
        if ended:
            break
        threading.Event().wait(0.2)
    created = int(store.get_job(job).creation_time)
    assert streams == [f"{job}/algo-1-{created}", f"{job}/algo-2-{created}"]
    for host, stream in zip(("algo-1", "algo-2"), streams):
        mine = [message for name, message in printed if name == stream]
        assert mine == store.log_path(job, host).read_text().splitlines()   # each line once, in order
        whole = [(e["timestamp"], e["message"]) for e in read_all(logs_client, stream)]
        assert [m for _, m in whole] == mine and read_all(logs_client, stream) == read_all(logs_client, stream)
        assert [t for t, _ in whole] == sorted(t for t, _ in whole)

    found = logs_client.filter_log_events(logGroupName=GROUP, logStreamNamePrefix=job + "/", filterPattern="loss=")
    assert len(found["events"]) == 24 and {e["logStreamName"] for e in found["events"]} == set(streams)
    assert [g["logGroupName"] for g in logs_client.describe_log_groups()["logGroups"]] == [GROUP]

    record = store.get_job(job)
    start = datetime.datetime.fromtimestamp(record.training_start_time, UTC)
    end = datetime.datetime.fromtimestamp(record.training_end_time, UTC) + datetime.timedelta(minutes=1)
    points = metrics_client.get_metric_statistics(   # TrainingJobAnalytics' request
        Namespace=GROUP, MetricName="loss", Dimensions=[{"Name": "TrainingJobName", "Value": job}], StartTime=start,
        EndTime=end, Period=60, Statistics=["Average"])["Datapoints"]
    first = record.training_start_time // 60 * 60   # StartTime rounded down to its minute
    buckets: dict[float, list[float]] = {}
    for point in store.metrics(job, "loss"):
        buckets.setdefault(first + (point["ts"] - first) // 60 * 60, []).append(point["value"])
    assert {p["Timestamp"].timestamp(): p["Average"] for p in points} == \
        pytest.approx({at: sum(values) / len(values) for at, values in buckets.items()})
    assert all(p["Unit"] == "None" and p["Timestamp"].tzinfo is not None for p in points)
    listed = metrics_client.list_metrics(Namespace=GROUP, Dimensions=[{"Name": "TrainingJobName", "Value": job}])
    assert [m["MetricName"] for m in listed["Metrics"]] == ["loss"]
    data = metrics_client.get_metric_data(StartTime=start, EndTime=end, MetricDataQueries=[
        {"Id": "n", "MetricStat": {"Metric": {"Namespace": GROUP, "MetricName": "loss",
                                              "Dimensions": [{"Name": "Host", "Value": f"{job}/algo-1"}]},
                                   "Period": 60, "Stat": "SampleCount"}}])["MetricDataResults"]
    assert sum(data[0]["Values"]) == 12 and data[0]["StatusCode"] == "Complete"
    with pytest.raises(logs_client.exceptions.ResourceNotFoundException):
        logs_client.get_log_events(logGroupName=GROUP, logStreamName=f"{job}/algo-3-{created}")
    with pytest.raises(metrics_client.exceptions.InvalidParameterValueException):
        metrics_client.get_metric_statistics(Namespace=GROUP, MetricName="loss", StartTime=start, EndTime=end,
                                             Period=61, Statistics=["Average"])


def read_all(client, stream: str) -> list[dict]:
    found, token = [], None
    while True:
        page = client.get_log_events(logGroupName=GROUP, logStreamName=stream, startFromHead=True,
                                     **({"nextToken": token} if token else {}))
        if not page["events"]:
            return found
        found += page["events"]
        token = page["nextForwardToken"]
