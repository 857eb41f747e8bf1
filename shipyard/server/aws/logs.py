"""CloudWatch Logs over the jobs' logs, as the sagemaker SDK reads a training job's logs (DescribeLogStreams, then
GetLogEvents per stream) and the console searches them (FilterLogEvents).

The group /aws/sagemaker/TrainingJobs holds a stream per host of each job, named as SageMaker names them
(`<job>/algo-1-<epoch seconds of the job's creation>`), which exists once that host's log file does; its events
are the file's lines. The files hold no times, so a line's time is the time this server first saw it: beside each
log an index of marks (`algo-1.log.marks`, a line `<end offset> <milliseconds>` per read that found complete
lines beyond the last mark) gives every line the time of the read that first found it, the same on every later
call. Times never go down along a file, so the SDK's resume (startTime = its last event's time, skipping the
events it saw at that time) neither loses nor repeats a line. Tokens are byte offsets in the log: `f/<offset>`
reads on from there, `b/<offset>` back from there."""

from __future__ import annotations

import base64
import bisect
import fcntl
import json
import os
import re
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from shipyard.server.aws.protocol import ACCOUNT, AwsError, Call
from shipyard.store import JobRecord, Store

GROUP = "/aws/sagemaker/TrainingJobs"
PAGE_BYTES = 1 << 20      # the messages of one page of events: at most 1 MB, as AWS
MAX_EVENTS = 10_000       # events a page (AWS's default and most)
MAX_STREAMS = 50          # streams or groups a page (AWS's default and most)
LISTED_JOBS = 500         # streams listed without a job's name in the prefix: those of the newest jobs
SCAN_BYTES = 8 << 20      # FilterLogEvents reads at most this much of each stream a call, then gives a token


def _invalid(message: str) -> AwsError:
    return AwsError("InvalidParameterException", message)


# -- streams ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stream:
    job: JobRecord
    host: str
    path: Path

    @property
    def name(self) -> str:
        return f"{self.job.name}/{self.host}-{int(self.job.creation_time)}"


def _streams_of(store: Store, record: JobRecord) -> list[Stream]:
    """The job's streams: those of its hosts that have written a log."""
    paths = ((host, store.log_path(record.name, host)) for host in record.spec.hosts)
    return [Stream(record, host, path) for host, path in paths if path.exists()]


def _streams(store: Store, prefix: str) -> list[Stream]:
    """The streams whose names start with `prefix`, found through the jobs its job part can name (job names
    hold no '/'), without reading every job unless the prefix is empty."""
    job, slash, _ = prefix.partition("/")
    if slash:
        records = [store.get_job(job)] if store.exists(job) else []
    elif prefix:
        records = [r for r in store.list_jobs(name_contains=prefix) if r.name.startswith(prefix)]
    else:
        records = store.list_jobs(limit=LISTED_JOBS)
    return [s for record in records for s in _streams_of(store, record) if s.name.startswith(prefix)]


def _named(store: Store, name: str) -> Stream | None:
    """The stream by its exact name (the job's creation time in it too); nothing but a host's log is reachable."""
    job, _, rest = name.partition("/")
    host, _, created = rest.rpartition("-")
    record = store.get_job(job) if job and store.exists(job) else None
    if record is None or host not in record.spec.hosts or created != str(int(record.creation_time)):
        return None
    path = store.log_path(job, host)
    return Stream(record, host, path) if path.exists() else None


def _stream(store: Store, name: str | None) -> Stream:
    found = _named(store, name or "")
    if found is None:
        raise AwsError("ResourceNotFoundException", "The specified log stream does not exist.")
    return found


def _check_group(params: dict) -> None:
    name, identifier = params.get("logGroupName"), params.get("logGroupIdentifier")
    if name and identifier:
        raise _invalid("LogGroup name and LogGroup ARN are mutually exclusive parameters.")
    if not (name or identifier):
        raise _invalid("Either logGroupName or logGroupIdentifier must be specified.")
    if identifier and identifier.startswith("arn:"):
        identifier = identifier.partition(":log-group:")[2].removesuffix(":*")
    if (name or identifier) != GROUP:
        raise AwsError("ResourceNotFoundException", "The specified log group does not exist.")


def _group_arn(region: str) -> str:
    return f"arn:aws:logs:{region}:{ACCOUNT}:log-group:{GROUP}"


# -- marks: a time for every line ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Marks:
    """Mark i covers the bytes [ends[i-1] (0 for the first), ends[i]) of the log, first seen at times[i] (ms)."""

    ends: tuple[int, ...] = ()
    times: tuple[int, ...] = ()

    @property
    def end(self) -> int:
        return self.ends[-1] if self.ends else 0

    def time_at(self, offset: int) -> int:
        return self.times[bisect.bisect_right(self.ends, offset)]

    def offset_of(self, ms: int) -> int:
        """Where the lines at or after `ms` begin."""
        i = bisect.bisect_left(self.times, ms)
        return self.ends[i - 1] if i else 0


def _marks_path(stream: Stream) -> Path:
    return stream.path.with_name(f"{stream.path.name}.marks")


def _parsed(text: str) -> Marks:
    """The marks in the index; after its last newline is one being written, and a line a crash cut short (its
    numbers shorter, so going back) is no mark."""
    ends, times = [0], [0]
    for row in (line.split() for line in text.split("\n")[:-1]):
        if len(row) == 2 and row[0].isdigit() and row[1].isdigit() and int(row[0]) > ends[-1] \
                and int(row[1]) >= times[-1]:
            ends.append(int(row[0]))
            times.append(int(row[1]))
    return Marks(tuple(ends[1:]), tuple(times[1:]))


def _ingest(stream: Stream) -> Marks:
    """The stream's marks, with a new one when its log holds complete lines beyond the last (its partial last
    line too once the job has ended)."""
    path = _marks_path(stream)
    try:
        marks = _parsed(path.read_text())
    except FileNotFoundError:
        marks = Marks()
    end = _complete_end(stream.path, marks.end, final=stream.job.terminal)
    if end <= marks.end:
        return marks
    with open(path, "a+") as f:
        # flock serialises the server's threads (each opens the file itself) and any other server on the store.
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        text = f.read()
        marks = _parsed(text)     # another thread may have marked these lines meanwhile
        if end > marks.end:
            # A log first read after it was written gets the time of its last write, not of the read.
            ms = max(marks.times[-1] if marks.times else 0,
                     min(int(time.time() * 1000), int(os.stat(stream.path).st_mtime * 1000)))
            cut = "\n" if text and not text.endswith("\n") else ""   # a write a crash cut short: not a mark
            f.write(f"{cut}{end} {ms}\n")
            marks = Marks(marks.ends + (end,), marks.times + (ms,))
    return marks


def _complete_end(path: Path, start: int, final: bool) -> int:
    """The offset after the log's last complete line (its end when `final`), or `start` if none lies after it."""
    size = os.stat(path).st_size
    if final or size <= start:
        return max(size, start)
    with open(path, "rb") as f:
        end = size
        while end > start:   # back from the end, a page at a time, to the last newline
            begin = max(start, end - PAGE_BYTES)
            f.seek(begin)
            newline = f.read(end - begin).rfind(b"\n")
            if newline >= 0:
                return begin + newline + 1
            end = begin
    return start


# -- events -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    offset: int
    end: int
    ms: int
    message: str


def _read(path: Path, start: int, stop: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(stop - start)


def _events(data: bytes, base: int, marks: Marks) -> Iterator[Event]:
    """The lines of `data` (read from offset `base`), each without its newline."""
    position = 0
    while position < len(data):
        newline = data.find(b"\n", position)
        end = len(data) if newline < 0 else newline + 1
        line = data[position:end].removesuffix(b"\n")
        yield Event(base + position, base + end, marks.time_at(base + position), line.decode(errors="replace"))
        position = end


def _forward(stream: Stream, marks: Marks, start: int, stop: int, limit: int) -> list[Event]:
    """The first events of [start, stop): at most `limit`, in at most a page of bytes."""
    if start >= stop:
        return []
    data = _read(stream.path, start, min(stop, start + PAGE_BYTES))
    if start + len(data) < stop:   # cut by the page: to its last complete line, unless one line fills it
        data = data[:data.rfind(b"\n") + 1] or data
    events = []
    for event in _events(data, start, marks):
        events.append(event)
        if len(events) == limit:
            break
    return events


def _backward(stream: Stream, marks: Marks, start: int, stop: int, limit: int) -> list[Event]:
    """The last events of [start, stop): at most `limit`, in at most a page of bytes."""
    if start >= stop:
        return []
    begin = max(start, stop - PAGE_BYTES)
    if begin == start:
        data = _read(stream.path, begin, stop)
    else:   # cut by the page (read from the byte before it): from its first whole line, unless one line fills it
        data = _read(stream.path, begin - 1, stop)
        cut = data.find(b"\n") + 1
        data = data[cut:] if 0 < cut < len(data) else data[1:]
        begin = stop - len(data)
    return list(_events(data, begin, marks))[-limit:]


def _window(params: dict, marks: Marks) -> tuple[int, int]:
    """The bytes whose lines' times are in [startTime, endTime)."""
    start, end = (_integer(params, member) for member in ("startTime", "endTime"))
    return (0 if start is None else marks.offset_of(start)), (marks.end if end is None else marks.offset_of(end))


def _integer(params: dict, member: str, low: int = 0, high: int | None = None) -> int | None:
    value = params.get(member)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low
                              or (high is not None and value > high)):
        bound = f" and less than or equal to {high}" if high is not None else ""
        raise _invalid(f"1 validation error detected: Value '{value}' at '{member}' failed to satisfy constraint: "
                       f"Member must have value greater than or equal to {low}{bound}")
    return value


def _limit(params: dict, most: int) -> int:
    return _integer(params, "limit", 1, most) or most


def _token(token: str) -> tuple[str, int]:
    direction, _, offset = token.partition("/")
    if direction not in ("f", "b") or not offset.isdigit():
        raise _invalid("The specified nextToken is invalid.")
    return direction, int(offset)


# A page's token for DescribeLogStreams and FilterLogEvents: where the page ended (never a path), opaque.
def _cursor(key: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode()


def _uncursor(token: str, types: tuple[type, ...]) -> list:
    """The key a token holds, its parts of these types (a token made up by a client is refused)."""
    try:
        key = json.loads(base64.urlsafe_b64decode(token.encode()))
    except ValueError:
        key = None
    if not (isinstance(key, list) and len(key) == len(types) and all(type(k) is t for k, t in zip(key, types))):
        raise _invalid("The specified nextToken is invalid.")
    return key


# -- operations ---------------------------------------------------------------------------------------------------
def describe_log_groups(call: Call, params: dict) -> dict:
    prefix, pattern = params.get("logGroupNamePrefix"), params.get("logGroupNamePattern")
    if prefix and pattern:
        raise _invalid("LogGroup name prefix and LogGroup name pattern are mutually exclusive parameters.")
    _limit(params, MAX_STREAMS)
    found = GROUP.startswith(prefix or "") and (pattern or "").lower() in GROUP.lower()
    arn = _group_arn(call.region)
    return {"logGroups": [{"logGroupName": GROUP, "arn": f"{arn}:*", "logGroupArn": arn, "storedBytes": 0,
                           "metricFilterCount": 0, "logGroupClass": "STANDARD"}] if found else []}


def describe_log_streams(call: Call, params: dict) -> dict:
    _check_group(params)
    prefix, order = params.get("logStreamNamePrefix") or "", params.get("orderBy") or "LogStreamName"
    if order not in ("LogStreamName", "LastEventTime"):
        raise _invalid(f"1 validation error detected: Value '{order}' at 'orderBy' failed to satisfy constraint: "
                       "Member must satisfy enum value set: [LogStreamName, LastEventTime]")
    if order == "LastEventTime" and prefix:
        raise _invalid("Cannot order by LastEventTime with a logStreamNamePrefix.")
    limit, descending = _limit(params, MAX_STREAMS), bool(params.get("descending"))
    described = [_described(s, call.region) for s in _streams(call.store, prefix)]
    by_time = order == "LastEventTime"
    key = (lambda d: [d["lastEventTimestamp"] or 0, d["logStreamName"]]) if by_time else \
        (lambda d: [d["logStreamName"]])
    described.sort(key=key, reverse=descending)
    if params.get("nextToken"):
        after = _uncursor(params["nextToken"], (int, str) if by_time else (str,))
        described = [d for d in described if (key(d) < after if descending else key(d) > after)]
    page = described[:limit]
    return {"logStreams": page, "nextToken": _cursor(key(page[-1])) if len(described) > limit else None}


def _described(stream: Stream, region: str) -> dict:
    marks = _ingest(stream)
    return {"logStreamName": stream.name, "creationTime": int(stream.job.creation_time * 1000),
            "firstEventTimestamp": marks.times[0] if marks.times else None,
            "lastEventTimestamp": marks.times[-1] if marks.times else None,
            "lastIngestionTime": marks.times[-1] if marks.times else None,
            "storedBytes": 0,   # deprecated by AWS, which answers 0
            "arn": f"{_group_arn(region)}:log-stream:{stream.name}"}


def get_log_events(call: Call, params: dict) -> dict:
    """A page of the stream's events from the head (startFromHead), from the tail (the default), or on from a
    token; at the end of the stream, the forward token passed and no events."""
    _check_group(params)
    stream = _stream(call.store, params.get("logStreamName"))
    marks = _ingest(stream)
    low, high = _window(params, marks)
    limit, token = _limit(params, MAX_EVENTS), params.get("nextToken")
    direction, at = _token(token) if token else ("f", low) if params.get("startFromHead") else ("b", high)
    if direction == "f":
        start = max(at, low)
        events = _forward(stream, marks, start, high, limit)
        forward, backward = (events[-1].end, events[0].offset) if events else (at, start)
    else:
        events = _backward(stream, marks, low, min(at, high), limit)
        forward, backward = (events[-1].end, events[0].offset) if events else (min(at, high), at)
    return {"events": [{"timestamp": e.ms, "message": e.message, "ingestionTime": e.ms} for e in events],
            "nextForwardToken": f"f/{forward}", "nextBackwardToken": f"b/{backward}"}


def filter_log_events(call: Call, params: dict) -> dict:
    """The events of the streams named (or all the group's, within its bounds) whose messages hold every term of
    a plain filter pattern, in time order across the streams."""
    _check_group(params)
    names, prefix = params.get("logStreamNames"), params.get("logStreamNamePrefix")
    if names and prefix:
        raise _invalid("You cannot specify both logStreamNames and logStreamNamePrefix.")
    terms = _terms(params.get("filterPattern") or "")
    limit = _limit(params, MAX_EVENTS)
    if names:
        streams = [s for s in (_named(call.store, name) for name in dict.fromkeys(names)) if s is not None]
    else:
        streams = _streams(call.store, prefix or "")
    after = tuple(_uncursor(params["nextToken"], (int, str, int))) if params.get("nextToken") else None
    found, bound = [], None
    for stream in streams:
        matched, last = _scan(stream, params, after, terms, limit)
        found += matched
        if last is not None and (bound is None or last < bound):
            bound = last    # this stream was read to `last` only: nothing after it may be answered yet
    found = sorted(e for e in found if bound is None or e[0] <= bound)
    page, size = [], 0
    for key, event in found:
        if page and (len(page) == limit or size + len(event.message.encode()) > PAGE_BYTES):
            break
        page.append((key, event))
        size += len(event.message.encode())
    more = page[-1][0] if len(page) < len(found) else bound
    return {"events": [{"logStreamName": key[1], "timestamp": e.ms, "message": e.message, "ingestionTime": e.ms,
                        "eventId": f"{e.ms:013d}{zlib.crc32(key[1].encode()):010d}{e.offset:019d}"}
                       for key, e in page],
            "nextToken": _cursor(list(more)) if more is not None else None}


def _scan(stream: Stream, params: dict, after: tuple | None, terms: list[str],
          limit: int) -> tuple[list[tuple[tuple, Event]], tuple | None]:
    """The stream's matching events after the cursor `after` ((ms, stream, offset), the order of the answer) and,
    when it stopped before the end of the window, the key of the last event it read."""
    marks = _ingest(stream)
    low, high = _window(params, marks)
    position = max(low, _resume(stream, marks, after)) if after else low
    matched: list[tuple[tuple, Event]] = []
    key = start = None   # start: the first event after the cursor, where the bytes read count from
    while position < high and len(matched) < limit and (start is None or position - start < SCAN_BYTES):
        events = _forward(stream, marks, position, high, MAX_EVENTS)
        if not events:
            break    # the log is shorter than its marks say
        for event in events:
            position, key = event.end, (event.ms, stream.name, event.offset)
            if after is not None and key <= after:
                continue
            start = event.offset if start is None else start
            if all(term in event.message for term in terms):
                matched.append((key, event))
                if len(matched) == limit:
                    break
    return matched, (key if position < high else None)


def _resume(stream: Stream, marks: Marks, after: tuple) -> int:
    """Where the stream's first event after the cursor can be: times only grow along a stream, so before the
    cursor's stream in the order that is the first line of a later time, after it the first of the same time."""
    ms, name, offset = after
    if stream.name == name:
        return offset    # the cursor's own event, then the next
    return marks.offset_of(ms + 1 if stream.name < name else ms)


_OTHER_SYNTAX = (("{", "JSON patterns ({ $.field = ... })"), ("[", "space-delimited patterns ([w1, w2])"),
                 ("%", "regular expressions (%...%)"))


def _terms(pattern: str) -> list[str]:
    """A plain filter pattern's terms (a quoted phrase is one term): each must be in a message, as AWS matches."""
    stripped = pattern.strip()
    for start, what in _OTHER_SYNTAX:
        if stripped.startswith(start):
            raise _invalid(f"Invalid filter pattern: shipyard matches plain terms and quoted phrases; {what} are "
                           "not supported")
    found = re.findall(r'"([^"]*)"|(\S+)', stripped)
    if any(plain[:1] in ("?", "-") for _, plain in found):
        raise _invalid("Invalid filter pattern: shipyard matches plain terms and quoted phrases; optional (?term) "
                       "and excluded (-term) terms are not supported")
    return [quoted or plain for quoted, plain in found]


OPERATIONS = {
    "DescribeLogGroups": describe_log_groups,
    "DescribeLogStreams": describe_log_streams,
    "GetLogEvents": get_log_events,
    "FilterLogEvents": filter_log_events,
}
