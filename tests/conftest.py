"""Shared fixtures. S3 is moto's server on loopback, so s3fs and boto3 talk real HTTP to it."""

from __future__ import annotations

import urllib.request

import pytest


def pytest_runtest_setup(item):
    """`@pytest.mark.sandbox` tests run only where bubblewrap works (the probe the backend itself uses),
    not merely where it is installed: a container without user namespaces skips them, saying why."""
    if item.get_closest_marker("sandbox"):
        from shipyard.backends.sandbox import bwrap_problem

        if problem := bwrap_problem():
            pytest.skip(f"no sandbox here: {problem}")


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh SHIPYARD_HOME: its own store, job directories and default output path. Jobs a test left
    running (it failed before they ended) are killed with their controllers, so they do not slow the
    tests after it."""
    path = tmp_path / "home"
    monkeypatch.setenv("SHIPYARD_HOME", str(path))
    yield path
    if (path / "shipyard.db").exists():
        import psutil

        from shipyard.control.reconcile import controller_alive, kill_leftovers
        from shipyard.store import Store

        store = Store(path)
        from shipyard.store.tuning import TuningStore

        for record in TuningStore(store).list():  # first, so they start no more jobs
            if not record.terminal and record.controller_pid and controller_alive(record):
                try:
                    psutil.Process(record.controller_pid).kill()
                except psutil.NoSuchProcess:
                    pass
        for record in store.list_jobs():
            if not record.terminal and record.controller_pid and controller_alive(record):
                try:
                    psutil.Process(record.controller_pid).kill()  # sandboxed instances die with it
                except psutil.NoSuchProcess:
                    pass
                kill_leftovers(record.name, store.job_dir(record.name))
        from shipyard.control.pools import reconcile_pools
        from shipyard.store.pools import PoolStore

        for pool in PoolStore(store).list(include_terminated=False):  # keepers outlive their jobs
            try:
                psutil.Process(pool.keeper_pid).kill()  # their warm sandboxes die with them
            except psutil.NoSuchProcess:
                pass
        reconcile_pools(store)


@pytest.fixture(scope="session")
def s3_server():
    """The endpoint URL of a moto S3 server running for the whole test session."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)  # port 0: any free one
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


class S3:
    """Test helper over the moto server: make buckets and objects with boto3."""

    def __init__(self, endpoint: str) -> None:
        import boto3

        self.endpoint = endpoint
        self.client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")

    def bucket(self, name: str) -> str:
        self.client.create_bucket(Bucket=name)
        return f"s3://{name}"

    def put(self, uri: str, data: bytes) -> None:
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def get(self, uri: str) -> bytes:
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()


@pytest.fixture
def s3(s3_server, monkeypatch):
    """Point shipyard (and any boto client) at the moto server; every test starts with no buckets."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SHIPYARD_S3_ENDPOINT_URL", s3_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    import s3fs

    # s3fs caches instances (and their listings) per argument set; start every test from scratch.
    s3fs.S3FileSystem.clear_instance_cache()
    yield S3(s3_server)
    s3fs.S3FileSystem.clear_instance_cache()
    urllib.request.urlopen(urllib.request.Request(f"{s3_server}/moto-api/reset", method="POST")).close()
