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


# The tests whose hosts are network namespaces (`make test` runs them alone, after the rest): under xdist
# one unit, so two of their clusters (a dozen Ray nodes) never start at once.
HOSTS_TESTS = "tests/e2e/hosts/"


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test`) a module runs on one worker (see pytest_xdist_make_scheduler), so a
    module-scoped fixture (a Ray cluster, a server, a browser) is made once. Modules with end-to-end (slow)
    tests go first and the quick ones fill in after, so neither worker is left with a long module at the
    end while the other is done."""
    slow = {item.module.__name__ for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module.__name__ not in slow)   # stable: the order within each kind stays


def pytest_xdist_make_scheduler(config, log):
    """Modules as units of work, in the collection's order (xdist's --dist loadfile would sort them by
    their number of tests), and the hosts' tests as one unit. (Not --dist loadgroup: with pytest 9 and
    xdist 3.8 its groups do not take effect, every test is scheduled alone.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return HOSTS_TESTS if nodeid.startswith(HOSTS_TESTS) else nodeid.split("::", 1)[0]

    config.option.loadscopereorder = False
    return ModuleScheduling(config, log)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh SHIPYARD_HOME: its own store, job directories and default output path. Jobs a test left
    running (it failed before they ended) are killed with their controllers, so they do not slow the
    tests after it."""
    path = tmp_path / "home"
    monkeypatch.setenv("SHIPYARD_HOME", str(path))
    yield path
    clean_home(path)


def clean_home(path) -> None:
    """Kill what jobs, tuning jobs and warm pools under SHIPYARD_HOME `path` left running."""
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


class S3Proxy:
    """An S3 endpoint in front of moto's that a test can hold, break and watch: `hold(bucket, after=n)` makes
    every object body of that bucket after the first n wait until `release()` (listings and HEADs still
    answer), `dark = True` answers every request 503 and cuts bodies being sent (the endpoint is down),
    `sent["bucket/key"]` counts the body bytes each object gave, and `requests` lists every request."""

    CHUNK = 64 * 1024

    def __init__(self, upstream: str) -> None:
        import collections
        import threading
        from http.server import ThreadingHTTPServer

        self.upstream = upstream.removeprefix("http://")
        self.open = threading.Event()
        self.open.set()
        self.held: str | None = None
        self.let_through = 0
        self.lock = threading.Lock()
        self.dark = False
        self.sent: collections.Counter = collections.Counter()
        self.requests: list[tuple[str, str]] = []   # (method, path) of every request
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def hold(self, bucket: str, after: int = 0) -> None:
        self.held, self.let_through = bucket, after
        self.open.clear()

    def release(self) -> None:
        self.open.set()

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        import http.client
        from http.server import BaseHTTPRequestHandler
        from urllib.parse import urlsplit

        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy.requests.append((self.command, self.path))
                if proxy.dark:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                path = urlsplit(self.path)
                bucket, _, key = path.path.lstrip("/").partition("/")
                is_body = self.command == "GET" and key and not path.query
                if is_body and bucket == proxy.held:
                    with proxy.lock:
                        proxy.let_through -= 1
                        held = proxy.let_through < 0
                    if held:
                        proxy.open.wait()
                upstream = http.client.HTTPConnection(proxy.upstream, timeout=60)
                upstream.request(self.command, self.path, body=body, headers=dict(self.headers))
                response = upstream.getresponse()
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection"):
                        self.send_header(name, value)
                self.end_headers()
                while self.command != "HEAD" and (chunk := response.read(proxy.CHUNK)):
                    if proxy.dark:   # gone in the middle of a body: the connection drops
                        self.close_connection = True
                        break
                    self.wfile.write(chunk)
                    if is_body:
                        proxy.sent[f"{bucket}/{key}"] += len(chunk)
                upstream.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        return Handler


@pytest.fixture
def s3_proxy(s3, s3_server, monkeypatch):
    """`s3` reached through an S3Proxy: SHIPYARD_S3_ENDPOINT_URL points at the proxy (the S3 helper itself
    still talks to moto directly)."""
    import s3fs

    proxy = S3Proxy(s3_server)
    monkeypatch.setenv("SHIPYARD_S3_ENDPOINT_URL", proxy.endpoint)
    s3fs.S3FileSystem.clear_instance_cache()
    yield proxy
    proxy.close()


class Server:
    """A real `shipyard server` process on 127.0.0.1 (its own port) over SHIPYARD_HOME, and a small client
    for it: `get`/`post` return (status, JSON or text), with the token when `token=True`."""

    def __init__(self, home) -> None:
        import json
        import os
        import subprocess
        import sys
        import time

        self.info_path = home / "server.json"
        self.process = subprocess.Popen([sys.executable, "-m", "shipyard.cli.main", "server", "--port", "0"],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env={**os.environ, "SHIPYARD_HOME": str(home)})
        deadline = time.monotonic() + 60
        while not self.info_path.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise AssertionError(f"the server did not start: {self.process.stdout.read()}")
            time.sleep(0.05)
        info = json.loads(self.info_path.read_text())
        self.url, self.token = info["url"], info["token"]

    def request(self, method: str, path: str, body: dict | None = None, token: bool | str = False,
                headers: dict | None = None):
        import json
        import urllib.error

        headers = dict(headers or {})
        if token:
            headers["Authorization"] = f"Bearer {self.token if token is True else token}"
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, kind, text = response.status, response.headers.get_content_type(), response.read().decode()
                self.last_headers = response.headers
        except urllib.error.HTTPError as error:
            status, kind, text = error.code, error.headers.get_content_type(), error.read().decode()
            self.last_headers = error.headers
        return status, json.loads(text) if kind == "application/json" else text

    def get(self, path: str, **kwargs):
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: dict | None = None, **kwargs):
        return self.request("POST", path, body, **kwargs)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except Exception:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def shipyard_server(home):
    """`shipyard server` over the test's SHIPYARD_HOME, stopped after the test."""
    server = Server(home)
    yield server
    server.stop()
