"""The project's own set-up: every dev/test dependency is pinned in the lock file, and scripts/setup.sh
rebuilds a venv that was not made from the current lock (run for real on a tiny project of its own)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements-dev.lock"


def _pins(text: str) -> dict[str, str]:
    return {_name(m.group(1)): m.group(2) for m in re.finditer(r"^([A-Za-z0-9_.\-]+)==(\S+)", text, re.MULTILINE)}


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-").replace(".", "-")


def test_every_requirement_is_pinned_in_the_lock():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        wanted |= {_name(r) for r in extra}
    pins = _pins(LOCK.read_text())
    assert sorted(wanted - set(pins)) == [], "not in requirements-dev.lock: run `make lock`"
    # torch is the local CPU wheel's version: a looser pin pulls gigabytes of CUDA packages.
    assert pins["torch"].split("+")[0] == "2.13.0"
    assert not any(name.startswith("nvidia-cu") or name.startswith("nvidia-nccl") for name in pins)


@pytest.mark.slow
def test_the_sagemaker_sdks_environment_is_locked_whole():
    """.venv-sagemaker (the real SDK the tests drive as a client) is exactly its own lock: every package
    pinned, the SDK among them at a v2 release."""
    pins = _pins((ROOT / "requirements-sagemaker.lock").read_text())
    assert pins["sagemaker"].startswith("2.") and {"boto3", "botocore"} <= set(pins)
    wanted = {_name(line) for line in (ROOT / "requirements-sagemaker.in").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    assert wanted <= set(pins)


def test_a_venv_from_another_lock_is_rebuilt(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts")
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "__init__.py").touch()
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n'
                         '[project]\nname = "tiny"\nversion = "1"\n')
    # the editable install builds with the lock's own setuptools (no build isolation)
    lock = tmp_path / "requirements-dev.lock"
    lock.write_text(f"setuptools=={_pins(LOCK.read_text())['setuptools']}\n")

    def setup() -> str:
        done = subprocess.run(["bash", "scripts/setup.sh"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert "creating .venv" in setup()
    site = next((tmp_path / ".venv" / "lib").glob("python3*/site-packages"))
    leftover = site / "leftover_from_an_old_lock.py"
    leftover.touch()
    assert setup() == "setup: ready (.venv/bin/python)\n"  # nothing changed: nothing done

    pyproject.write_text(pyproject.read_text().replace('version = "1"', 'version = "2"'))
    assert "rebuilding" not in setup() and leftover.exists()  # only the project itself is reinstalled
    assert subprocess.run([str(tmp_path / ".venv/bin/python"), "-c", "import importlib.metadata as m; "
                           "assert m.version('tiny') == '2'"], cwd="/").returncode == 0

    lock.write_text(lock.read_text() + "# refreshed\n")
    assert "rebuilding .venv: it was not made from the current requirements-dev.lock" in setup()
    assert not leftover.exists()
