"""The Ray backend at the scale of a small cluster (issue 23): sixteen instances on eight hosts that are
really apart (tests/e2e/netns.py), two per host, their logs arriving complete and in order per host.

The cluster: a head with no CPUs (where the job is submitted from with the `shipyard` CLI) and eight
two-CPU workers; the job packs its one-CPU instances (SHIPYARD_RAY_PACK=1), so each worker runs two.
Every instance prints LINES numbered lines as fast as it can; the controller copies each host's log
from its node while it runs."""

from __future__ import annotations

import collections
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.e2e import netns
from tests.e2e.netns import NetnsCluster, Unavailable

pytestmark = [pytest.mark.slow, pytest.mark.sandbox, pytest.mark.netns]
SCRIPTS = Path(__file__).parent.parent / "scripts"
HEAD, WORKERS, PER_WORKER = 0, 8, 2
LINES = 5000
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """The head (no CPUs) and eight two-CPU Ray workers, torn down with the module."""
    started = time.monotonic()
    try:
        cluster = NetnsCluster(tmp_path_factory.mktemp("netns"), size=1 + WORKERS, head_cpus=0,
                               worker_cpus=PER_WORKER)
    except Unavailable as why:
        pytest.skip(f"no network namespaces here: {why}")
    try:
        with cluster:
            print(f"\n[netns] {cluster.size} hosts and their Ray nodes up in {time.monotonic() - started:.1f} s")
            yield cluster
    except Unavailable as why:
        pytest.skip(f"no network namespaces here: {why}")


@pytest.fixture(scope="module")
def s3_on_bridge(hosts):
    with netns.s3_on_bridge(hosts, ("out",)) as endpoint:
        yield endpoint


def test_sixteen_instances_on_eight_hosts_log_everything_in_order(hosts, s3_on_bridge):
    source = hosts.on_host(HEAD, "/tmp/lines-src")
    source.mkdir()
    shutil.copy(SCRIPTS / "hosts_lines.py", source / "train.py")
    name = f"lines-{os.getpid()}"
    count = WORKERS * PER_WORKER
    env = {"RAY_ADDRESS": hosts.ray_address, "SHIPYARD_HOME": "/tmp/shipyard-home", "SHIPYARD_RAY_PACK": "1",
           "SHIPYARD_S3_ENDPOINT_URL": s3_on_bridge, **AWS}
    started = time.monotonic()
    ran = hosts.run(HEAD, [
        "shipyard", "run", "train.py", "--source-dir", "/tmp/lines-src", "--instance-count", str(count),
        "--hp", f"lines={LINES}", "--output-path", "s3://out/jobs", "--backend", "ray", "--job-name", name,
        "--no-logs"], env, timeout=400)
    logs = hosts.on_host(HEAD, f"/tmp/shipyard-home/jobs/{name}/logs")
    print(f"\n[scale] {count} instances ran in {time.monotonic() - started:.1f} s")
    assert ran.returncode == 0, f"{ran.stdout[-3000:]}\n{ran.stderr[-3000:]}"

    placed = collections.Counter()
    for i in range(1, count + 1):
        host = f"algo-{i}"
        text = (logs / f"{host}.log").read_text()
        numbered = [int(m[1]) for m in re.finditer(rf"^{host} line (\d+)$", text, re.MULTILINE)]
        assert numbered == list(range(LINES)), f"{host}: {len(numbered)} lines, first out of order at " \
            f"{next((k for k, n in enumerate(numbered) if n != k), None)}"
        assert f"{host} wrote {LINES} lines" in text
        placed[re.search(rf"{host} started on node \S+ \(([\d.]+)\)", text)[1]] += 1
    assert placed == {address: PER_WORKER for address in hosts.addresses[1:]}   # two on every worker
