from __future__ import annotations

import os
import sys

import pytest

from shipyard.errors import StorageError
from shipyard.storage import uri


def test_import_is_light():
    code = "import sys, shipyard.storage.uri, shipyard.storage.transfer, shipyard.storage.archive; " \
           "print(sorted(m for m in ('s3fs', 'boto3', 'botocore', 'aiobotocore') if m in sys.modules))"
    out = os.popen(f"{sys.executable} -c \"{code}\"").read().strip()
    assert out == "[]"


@pytest.mark.parametrize(
    "base, parts, expected",
    [
        ("s3://b/out", ("job", "output"), "s3://b/out/job/output"),
        ("s3://b/out/", ("/job/", "output/"), "s3://b/out/job/output"),
        ("s3://b", ("k",), "s3://b/k"),
        ("file:///tmp/x", ("a", "b"), "file:///tmp/x/a/b"),
        ("/tmp/x", ("a", "b"), "/tmp/x/a/b"),
        ("rel", ("a",), "rel/a"),
        ("s3://b/out", (), "s3://b/out"),
    ],
)
def test_join(base, parts, expected):
    assert uri.join(base, *parts) == expected


def test_is_local():
    assert uri.is_local("/tmp/x") and uri.is_local("rel/x") and uri.is_local("file:///tmp/x")
    assert not uri.is_local("s3://b/x") and not uri.is_local("memory://x")


def test_local_filesystem_paths_are_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fs, path = uri.filesystem("sub/file.txt")
    assert "file" in fs.protocol and path == f"{tmp_path}/sub/file.txt"
    fs, path = uri.filesystem(f"file://{tmp_path}/a")
    assert "file" in fs.protocol and path == f"{tmp_path}/a"


def test_exists_local(tmp_path):
    (tmp_path / "f").write_text("x")
    assert uri.exists(str(tmp_path / "f")) and uri.exists(f"file://{tmp_path}")
    assert not uri.exists(str(tmp_path / "missing"))


def test_unknown_scheme_is_a_storage_error():
    with pytest.raises(StorageError, match=r"nosuchscheme://bucket/x.*scheme"):
        uri.filesystem("nosuchscheme://bucket/x")


def test_s3_endpoint_precedence(monkeypatch):
    for name in uri.ENDPOINT_ENV:
        monkeypatch.delenv(name, raising=False)
    assert uri.s3_endpoint() is None
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://generic")
    assert uri.s3_endpoint() == "http://generic"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3-specific")
    assert uri.s3_endpoint() == "http://s3-specific"
    monkeypatch.setenv("SHIPYARD_S3_ENDPOINT_URL", "http://shipyard")
    assert uri.s3_endpoint() == "http://shipyard"
    fs, path = uri.filesystem("s3://bucket/key")
    assert fs.client_kwargs["endpoint_url"] == "http://shipyard" and path == "bucket/key"


def test_s3_read_timeout_reaches_botocore_and_a_bad_one_is_named(monkeypatch):
    from shipyard.errors import ValidationError

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("SHIPYARD_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("SHIPYARD_S3_READ_TIMEOUT", "600")
    fs, _ = uri.filesystem("s3://bucket/key")
    fs.connect()   # makes the botocore client (sends nothing)
    assert fs.s3.meta.config.read_timeout == 600.0
    monkeypatch.delenv("SHIPYARD_S3_READ_TIMEOUT")
    assert "read_timeout" not in uri.filesystem("s3://bucket/key")[0].config_kwargs   # botocore's default
    for bad in ("ten", "0", "-5"):
        monkeypatch.setenv("SHIPYARD_S3_READ_TIMEOUT", bad)
        with pytest.raises(ValidationError, match=f"^SHIPYARD_S3_READ_TIMEOUT='{bad}': must be a number of "
                                                  "seconds > 0, e.g. 600"):
            uri.filesystem("s3://bucket/key")


def test_s3_exists(s3):
    bucket = s3.bucket("exists")
    s3.put(f"{bucket}/pre/fix/obj", b"1")
    assert uri.exists(f"{bucket}/pre/fix/obj")
    assert uri.exists(f"{bucket}/pre")
    assert not uri.exists(f"{bucket}/nothing")
    assert not uri.exists("s3://no-such-bucket-here/x")


def test_s3_sees_objects_written_after_a_listing(s3):
    from shipyard.storage import transfer

    bucket = s3.bucket("fresh")
    s3.put(f"{bucket}/p/first", b"1")
    assert not uri.exists(f"{bucket}/p/later")
    assert transfer.list_objects(f"{bucket}/p") == ["first"]
    s3.put(f"{bucket}/p/later", b"1")
    assert uri.exists(f"{bucket}/p/later")
    assert transfer.list_objects(f"{bucket}/p") == ["first", "later"]


@pytest.mark.parametrize("value", ["2026-11-26T18:17:00.000Z", "2026-11-26T18:17:00Z", "2026-11-26T20:17:00+02:00",
                                   "2026-11-26T18:17:00", "Thu, 26 Nov 2026 18:17:00 GMT", 1795716420])
def test_timestamps_are_what_botocore_makes_of_them(value):
    from botocore.utils import parse_timestamp

    ours, botocores = uri.timestamp(value), parse_timestamp(value)
    assert ours == botocores and (ours.tzinfo is None) == (botocores.tzinfo is None)


def test_s3_listings_times_go_through_the_quick_parser(s3, monkeypatch):
    """A FastFile channel's script waits for the whole listing: dateutil took 0.05 s of each 1,000 keys."""
    bucket = s3.bucket("times")
    s3.put(f"{bucket}/a", b"a")
    parsed = []
    monkeypatch.setattr(uri, "timestamp", lambda value: parsed.append(value) or value)
    fs, path = uri.filesystem(f"{bucket}/a")
    (entry,) = fs.call_s3("list_objects_v2", Bucket="times")["Contents"]
    assert parsed == [entry["LastModified"]] and entry["LastModified"].endswith("Z")


@pytest.mark.parametrize("text", ["s3://b/k", "s3a://b/k", "file:///x/y", "local:///x", "/abs/x", "rel/x", "c://x",
                                  "data:abc", "s3:/b/k", "memory://x", "simplecache::s3://b/k", "://x", ""])
def test_a_scheme_is_read_as_fsspec_reads_it_without_importing_it(text):
    from fsspec.core import split_protocol

    assert uri._protocol(text) == split_protocol(text)[0]


def test_a_local_uri_names_its_path_without_fsspec():
    code = ("import sys; from shipyard.storage import uri; "
            "assert uri.is_local('file:///x/a.tar.gz') and uri.local_path('file:///x/a.tar.gz') == '/x/a.tar.gz'; "
            "assert uri.local_path('/x/a') == '/x/a' and uri.local_path('rel/a') == 'rel/a'; "
            "print('fsspec' in sys.modules)")
    out = os.popen(f'{sys.executable} -c "{code}"').read().strip()
    assert out == "False"
