"""The model and output tarballs of a Ray job, made of the shares each node uploads (backends/ray/streams.py,
storage/archive.py) and assembled in storage by the controller (RayBackend.upload_artifacts): the same
tarballs as a local job's, while the bytes of a large share never come to the controller."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import types
from pathlib import Path

from shipyard.backends.local import LocalBackend
from shipyard.backends.ray import streams
from shipyard.backends.ray.backend import SHARES_DIR, RayBackend
from shipyard.storage import archive, transfer

MIB = 1 << 20


def _host(root: Path, host: str, files: dict[str, bytes]) -> Path:
    ml = root / host / "ml"
    for name, body in files.items():
        (ml / name).parent.mkdir(parents=True, exist_ok=True)
        (ml / name).write_bytes(body)
    (ml / "model").mkdir(parents=True, exist_ok=True)
    return ml


def _shared(root: Path, output: str, hosts: dict[str, dict[str, bytes]]) -> list:
    """Each host's node side: its shares uploaded (as its actor does), its log lines kept."""
    instances = []
    for host, files in hosts.items():
        ml = _host(root, host, files)
        log = root / f"{host}.log"
        shares = streams.share_artifacts(ml, f"{output}/{SHARES_DIR}/attempt-1/{host}", str(log))
        instances.append(types.SimpleNamespace(host=host, shares=shares, log=log,
                                               plan=types.SimpleNamespace(ml_dir=ml)))
    return instances


def _members(body: bytes) -> dict[str, bytes]:
    """The tarball's files, read as a stream (what tarfile's "r|gz" reads is one gzip member) and whole,
    and as `gzip` and GNU tar read it."""
    with tarfile.open(fileobj=io.BytesIO(body), mode="r|gz") as tar:
        streamed = {m.name: tar.extractfile(m).read() for m in tar}
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert {m.name: tar.extractfile(m).read() for m in tar.getmembers()} == streamed
    listed = subprocess.run(["tar", "tzf", "-"], input=body, capture_output=True, check=True).stdout.decode()
    assert listed.split() == list(streamed)
    return streamed


def test_tarballs_are_assembled_from_the_nodes_shares_in_storage(s3_proxy, s3, tmp_path):
    bucket = s3.bucket("ray-out")
    output = f"{bucket}/job/output"
    weights = os.urandom(6 * MIB)   # larger than S3's smallest part: copied in place
    instances = _shared(tmp_path, output, {
        "algo-1": {"model/weights.bin": weights, "model/config.json": b"{}", "output/data/algo-1.txt": b"one",
                   "output/failure": b"", "output/success": b""},
        "algo-2": {"model/algo-2.json": b"two", "output/data/algo-2.txt": b"two"},
    })
    s3_proxy.sent.clear()
    reported = []
    uploaded = RayBackend(tmp_path / "controller").upload_artifacts(
        instances, output, lambda name: lambda done, total: reported.append((name, done, total)))

    model, data = s3.get(f"{output}/model.tar.gz"), s3.get(f"{output}/output.tar.gz")
    assert _members(model) == {"config.json": b"{}", "weights.bin": weights, "algo-2.json": b"two"}
    assert _members(data) == {"algo-1.txt": b"one", "algo-2.txt": b"two"}
    assert uploaded == {"model.tar.gz": (3, len(model)), "output.tar.gz": (2, len(data))}
    # algo-1's model share is one part copy; only algo-2's small share was read here (to send it on).
    def share(index: int, name: str) -> tuple[str, int]:
        """A share and what of it is read here: whole, or after its gzip header when it is not the first."""
        host, size = instances[index].host, instances[index].shares[name]["bytes"]
        return f"ray-out/job/output/{SHARES_DIR}/attempt-1/{host}/{name}", size - (index > 0) * archive.SHARE_DATA

    read_here = {key: n for key, n in s3_proxy.sent.items() if SHARES_DIR in key}
    assert read_here == dict([share(1, "model.tar.gz"), share(0, "output.tar.gz"), share(1, "output.tar.gz")])
    assert not any(SHARES_DIR in key for key in transfer.list_objects(f"{bucket}/"))   # the shares are gone
    assert reported[-1] == ("output.tar.gz", len(data), len(data))
    assert "upload model.tar.gz share: " in (tmp_path / "algo-1.log").read_text()   # the node's progress


def test_clashing_names_keep_the_later_host_as_a_local_job_does(s3, tmp_path):
    bucket = s3.bucket("ray-clash")
    output = f"{bucket}/job/output"
    hosts = {"algo-1": {"model/model.pt": b"first", "model/x": b"a file", "model/only-1": b"1"},
             "algo-2": {"model/model.pt": b"second", "model/x/inner": b"in a directory"}}
    instances = _shared(tmp_path, output, hosts)
    uploaded = RayBackend(tmp_path / "controller").upload_artifacts(instances, output, lambda name: None)
    local = LocalBackend(tmp_path / "local").upload_artifacts(instances, f"{bucket}/local", lambda name: None)

    expected = {"model.pt": b"second", "only-1": b"1", "x/inner": b"in a directory"}
    assert _members(s3.get(f"{output}/model.tar.gz")) == expected
    assert _members(s3.get(f"{bucket}/local/model.tar.gz")) == expected
    assert uploaded["model.tar.gz"][0] == local["model.tar.gz"][0] == 3


def test_a_job_with_no_files_gets_empty_tarballs(tmp_path):
    output = str(tmp_path / "out")
    uploaded = RayBackend(tmp_path / "controller").upload_artifacts(
        _shared(tmp_path, output, {"algo-1": {}}), output, lambda name: None)
    assert uploaded == {"model.tar.gz": (0, uploaded["model.tar.gz"][1]), "output.tar.gz": (0, uploaded[
        "output.tar.gz"][1])}
    for name in uploaded:
        assert _members((tmp_path / "out" / name).read_bytes()) == {}
