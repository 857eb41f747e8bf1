"""Issue 14, from inside a job: each instance sees what a SageMaker container has, a read-only system, its
own writable /opt/ml, /tmp and /dev/shm, the user's Python environment, and nothing of the user's home
directory, the project the job was submitted from, other jobs' data or the store. One 2-instance job
(tests/e2e/scripts/isolation_probe.py) reports every observation; each is asserted here."""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

import shipyard
from shipyard.pytorch import PyTorch
from shipyard.runtime.namespace import HOST_VIEW

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]
SCRIPTS = Path(__file__).parent / "scripts"
PROJECT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_each_instance_sees_a_container_file_system(home, tmp_path, monkeypatch, warm):
    """Warm (issue 16): the probe runs twice on one warm pool; the second run, in the sandboxes the first
    wrote its files in, must see exactly what a cold instance sees."""
    other_job = home / "jobs" / "someone-elses-job"
    other_job.mkdir(parents=True)
    (other_job / "secret.txt").write_text("another job's data")
    # A file in the submitting user's real home directory, removed afterwards.
    user_dir = Path(tempfile.mkdtemp(prefix="shipyard-isolation-", dir=Path.home()))
    (user_dir / "secret.txt").write_text("the user's")
    monkeypatch.chdir(PROJECT)  # submitted from the project checkout, as a user would
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(SCRIPTS / "isolation_probe.py", source / "train.py")
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.txt").write_text("channel data")
    (tmp_path / "host-tmp.txt").write_text("this machine's /tmp")
    hidden = [str(user_dir / "secret.txt"), str(other_job / "secret.txt"), str(home / "shipyard.db"),
              str(Path(__file__).resolve()), str(tmp_path / "host-tmp.txt"), str(HOST_VIEW / "etc" / "hostname")]
    try:
        est = PyTorch(entry_point="train.py", source_dir=str(source), instance_count=2, instance_type="local",
                      distribution={"torch_distributed": {"enabled": True}}, max_run=300, stop_grace_seconds=5,
                      hyperparameters={"hidden": json.dumps(hidden), "channel-source": str(data)},
                      keep_alive_period_in_seconds=30 if warm else None)
        est.fit({"train": f"file://{data}"}, logs=False)
        if warm:
            first = est.latest_training_job
            est.fit({"train": f"file://{data}"}, logs=False)
            assert first.describe()["WarmPoolStatus"]["ReusedByJob"] == est.latest_training_job.name
            est.update(keep_alive_period_in_seconds=0)
    finally:
        shutil.rmtree(user_dir)
    assert (home / "shipyard.db").exists()  # the store is there, just not for the instances

    with tarfile.open(est.model_data.removeprefix("file://")) as tar:  # /opt/ml/model was writable
        seen = {m.name.removesuffix(".json"): json.loads(tar.extractfile(m).read()) for m in tar.getmembers()
                if m.isfile()}
    assert sorted(seen) == ["algo-1", "algo-2"]
    # What is bound into /tmp on purpose: the way to this test's files, and to the Python environment
    # when it lives there (a checkout in /tmp with its .venv, as on a fresh clone).
    bound = {path.resolve() for path in (tmp_path, Path(sys.prefix))}
    own_in_tmp = sorted({path.parts[2] for path in bound if path.is_relative_to("/tmp")})
    for host, record in seen.items():
        assert record["hostname"] == host
        # A read-only system, and a read-only view of the local input.
        assert record["system_writes"] == dict.fromkeys(record["system_writes"], "EROFS")
        assert record["channel"] == "channel data" and record["channel_source_write"] == "EROFS"
        # Nothing of the user's home, the project, other jobs, the store or this machine's /tmp.
        assert record["visible"] == dict.fromkeys(hidden, False)
        assert record["home_write"] is None  # an empty home of its own, as a container has
        # /tmp and /dev/shm its own: nothing of this machine's /tmp but the way to the job's own files bound
        # there (this test's SHIPYARD_HOME and data are in it), besides torchrun's log directory; and each
        # instance reads back what it wrote under the same name as the other.
        assert [n for n in record["at_start"]["/tmp"] if not n.startswith("torchelastic_")] == own_in_tmp
        assert record["at_start"]["/dev/shm"] == []
        assert record["private"] == {"/tmp": host, "/dev/shm": host}
        # The Python environment stays: torch (gloo ran the barrier) and this very shipyard.
        assert record["python"]["torch"]
        assert record["python"]["shipyard.parallel"] == str(Path(shipyard.__file__).parent / "parallel")
