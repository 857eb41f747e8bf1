"""Turn a URI into an fsspec filesystem and a path on it, and small URI helpers.

fsspec itself is light; s3fs/botocore are imported by fsspec only when an s3:// URI is resolved."""

from __future__ import annotations

import datetime
import functools
import os
import re
import uuid
from typing import TYPE_CHECKING

from shipyard import settings
from shipyard.errors import StorageError

if TYPE_CHECKING:
    import fsspec

LOCAL_PROTOCOLS = frozenset({"file", "local"})
# What jobs read and write: S3 (or an endpoint speaking it) and this machine's files. Any other fsspec
# scheme is refused by name rather than tried (ftp:// would first try to connect).
PROTOCOLS = frozenset({"s3", "s3a", *LOCAL_PROTOCOLS})
# `s3:/bucket` or `file:/x`: a scheme with one slash, which would otherwise be read as a relative path.
_ONE_SLASH = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:/(?!/)")
ENDPOINT_ENV = ("SHIPYARD_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def _protocol(uri: str) -> str | None:
    """The scheme, as fsspec's split_protocol reads it (without importing fsspec: 0.03 s a cold agent
    saves when its code and channels are local or on s3lite's endpoint); None for a plain path."""
    scheme, separator, _ = uri.partition("://")
    if separator and len(scheme) > 1:   # one letter: a Windows drive
        return scheme
    return "data" if uri.startswith("data:") else None


def s3_endpoint() -> str | None:
    """The S3 endpoint to use, most specific environment variable first."""
    return next((os.environ[k] for k in ENDPOINT_ENV if os.environ.get(k)), None)


# What the user can do about botocore's errors that mean "S3 is not set up", by the error's class name
# (botocore is imported only with s3fs, so its classes are not imported here).
_SETUP_HINTS = {
    "NoCredentialsError": "no AWS credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or "
                          "AWS_PROFILE) as for any AWS tool (docs/storage.md)",
    "PartialCredentialsError": "the AWS credentials are incomplete; set both AWS_ACCESS_KEY_ID and "
                               "AWS_SECRET_ACCESS_KEY (docs/storage.md)",
    "EndpointConnectionError": "cannot reach the S3 endpoint {endpoint}; start it or point "
                               "SHIPYARD_S3_ENDPOINT_URL at one that runs (docs/storage.md)",
    "ConnectTimeoutError": "the S3 endpoint {endpoint} does not answer; point SHIPYARD_S3_ENDPOINT_URL at one "
                           "that runs (docs/storage.md)",
}


def storage_problem(exc: BaseException) -> str:
    """One line saying what went wrong with a storage call and, for a storage that is not set up (no
    credentials, no endpoint), what to set; never a traceback."""
    hint = _SETUP_HINTS.get(type(exc).__name__)
    if hint:
        return hint.format(endpoint=s3_endpoint() or "of AWS (no SHIPYARD_S3_ENDPOINT_URL is set)")
    return f"{type(exc).__name__}: {exc}"


def looks_like_uri(text: str) -> bool:
    """Whether `text` has a scheme (a local path is made absolute, a URI is not), one slash or two."""
    return "://" in text or bool(_ONE_SLASH.match(text))


def check_form(uri: str) -> None:
    """StorageError for a URI no job can use: an unsupported scheme, or one slash after the scheme."""
    if _ONE_SLASH.match(uri):
        scheme, _, rest = uri.partition(":/")
        rest = f"/{rest}" if scheme in LOCAL_PROTOCOLS else rest  # file:///path: the path keeps its root
        raise StorageError(f"{uri}: a URI needs two slashes after the scheme; did you mean {scheme}://{rest}?")
    protocol = _protocol(uri)
    if protocol is not None and protocol not in PROTOCOLS:
        raise StorageError(f"{uri}: the scheme {protocol}:// is not supported; use s3://, file:// or a local path")


def filesystem(uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem that handles `uri` and the path of `uri` on it (absolute for local paths)."""
    from fsspec.core import url_to_fs

    check_form(uri)
    protocol = _protocol(uri)
    kwargs: dict = {}
    if protocol in ("s3", "s3a"):
        endpoint = s3_endpoint()
        if endpoint:
            kwargs["client_kwargs"] = {"endpoint_url": endpoint}
        if read_timeout := settings.s3_read_timeout():
            kwargs["config_kwargs"] = {"read_timeout": read_timeout}
        # Other hosts and processes write under the same prefixes: never answer from a stale
        # listing. The instance itself stays cached (per endpoint): a new client costs ~1 s.
        kwargs["use_listings_cache"] = False
    try:
        fs, path = url_to_fs(uri, **kwargs)
        if protocol in ("s3", "s3a") and fs.session is None:   # a new one
            fs.session = _session(fs.kwargs)
    except ImportError as exc:
        raise StorageError(
            f"{uri}: the filesystem for {protocol}:// is not installed ({exc}); install its fsspec "
            f"package (s3:// needs s3fs)"
        ) from None
    except ValueError as exc:
        raise StorageError(
            f"{uri}: no filesystem handles the scheme {protocol!r} ({exc}); check the scheme "
            f"(s3://, file:// or a plain path) or install the fsspec package for it"
        ) from None
    return fs, path


def reader(uri: str):
    """(file system, path) to list `uri`'s objects and read them (transfer.paged_listing, open_listed):
    storage/s3lite.py's client where it serves (neither fsspec nor an S3 client to import first), else
    filesystem(uri)."""
    from shipyard.storage import s3lite

    quick = s3lite.client(uri, s3_endpoint())
    if quick is None:
        return filesystem(uri)
    return quick, uri.split("://", 1)[1]


def _session(options: dict):
    """The session s3fs would make for a new S3 filesystem, quicker: botocore's data files (the S3 model, its
    endpoint rules) read once per process, a new client then takes 5 ms instead of 60; responses' ISO 8601
    times parsed by datetime rather than dateutil's general parser, which took 0.05 s of a 1,000-key page
    (a FastFile channel's script waits for the whole listing)."""
    from aiobotocore.session import AioSession

    session = AioSession(**options)
    session.register_component("data_loader", _loader())
    session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=timestamp)
    return session


@functools.cache
def _loader():
    from botocore.loaders import create_loader

    return create_loader()


def preload_s3() -> None:
    """Import the S3 client and read what one is made from, here once for every process forked from this
    one (a warm instance's jobs' agents); no thread, no connection."""
    import botocore.session
    import s3fs  # noqa: F401

    session = botocore.session.Session()
    session.register_component("data_loader", _loader())
    session.create_client("s3", region_name="us-east-1", aws_access_key_id="-", aws_secret_access_key="-")


def timestamp(value) -> datetime.datetime:
    """What botocore's parse_timestamp makes of `value`, an ISO 8601 time with its zone quickly."""
    if isinstance(value, str) and value[10:11] == "T":
        try:
            parsed = datetime.datetime.fromisoformat(value)
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return parsed
    from botocore.utils import parse_timestamp

    return parse_timestamp(value)


def is_local(uri: str) -> bool:
    return _protocol(uri) in (None, *LOCAL_PROTOCOLS)


def local_path(uri: str) -> str:
    """The path a local URI (is_local) names: file:///x/y is /x/y."""
    protocol = _protocol(uri)
    return uri[len(protocol) + 3:] if protocol else uri


def join(uri: str, *parts: str) -> str:
    """Append path parts to a URI or path, with exactly one '/' between them."""
    parts = tuple(p.strip("/") for p in parts if p.strip("/"))
    if _protocol(uri) is None:
        return os.path.join(uri, *parts)
    if not parts:
        return uri
    return "/".join((uri.rstrip("/"), *parts))


def exists(uri: str) -> bool:
    fs, path = filesystem(uri)
    try:
        return fs.exists(path)
    except OSError as exc:
        raise StorageError(f"could not check {uri}: {exc}") from exc


def check_writable(uri: str) -> None:
    """StorageError unless a job could write under `uri`, found before the job starts rather than as
    upload warnings in the middle of it. Local: the nearest existing ancestor is a writable directory
    (nothing is created). S3: an empty object written and deleted under the prefix."""
    fs, path = filesystem(uri)
    if is_local(uri):
        existing = path
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            raise StorageError(f"{uri}: {existing} is a file, so nothing can be written under it")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise StorageError(f"{uri}: {existing} is not writable by this user")
        return
    probe = f"{path.rstrip('/')}/.shipyard-write-check-{uuid.uuid4().hex}"
    try:
        fs.pipe_file(probe, b"")
        fs.rm_file(probe)
    except Exception as exc:  # botocore's and s3fs's errors have no common base to name
        raise StorageError(f"{uri}: cannot write there: {storage_problem(exc)}") from None


def remove_tree(uri: str) -> None:
    """Delete everything under `uri` (a prefix or a directory); nothing there is not an error."""
    fs, path = filesystem(uri)
    try:
        if fs.exists(path):
            fs.rm(path, recursive=True)
    except Exception as exc:  # botocore's and s3fs's errors have no common base to name
        raise StorageError(f"could not delete {uri}: {storage_problem(exc)}") from None
