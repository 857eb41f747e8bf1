"""Every command in README.md and docs/**/*.md runs as written (issue 21), the way doctest runs examples.

What a code block is, is said by its fence's info string (the words after the opening ```):

    sh, bash             run: one `bash -euo pipefail` per block
    console              run: the lines that start with `$ ` (a trailing backslash continues one); the
                         other lines are sample output, not compared
    python               run: one `python` per block
    python excerpt       a piece of a training script, or a call shown without what surrounds it: only
                         compiled (it must be valid Python)
    LANG skip: REASON    not run, for the reason given (it runs until stopped, needs a GPU or a Ray
                         cluster, is a benchmark of minutes, ...); a skip without a reason is an error
    LANG file=PATH       shows the repository's file PATH, and must equal it
    anything else        text, yaml, json: output, layouts and files shown; not run

A fence without a language is an error: every block says what it is. docs/benchmarks.md's commands are
all skipped: each is a benchmark of minutes (`make bench` runs benchmarks/run.py; the others are run by
hand, their results recorded next to them).

Each document is one test: its blocks run in order, from the root of a copy of this repository (what
they write lands there, never in the checkout; `.venv` is linked, and the package is the one installed
in it from this checkout), with the venv's bin first on PATH as README's `. .venv/bin/activate` puts it,
a fresh SHIPYARD_HOME, and the S3 variables docs/storage.md tells users to export, pointing at a moto
server this test runs on a free port in place of the doc's `moto_server -p 9000` (the one block there
that is skipped). Exports do not carry from block to block, so every block stands on its own."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import textwrap
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.conftest import clean_home

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUN = {"sh", "bash", "console", "python"}
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
# The endpoint docs/storage.md's own moto server listens on; the test's server replaces it.
DOC_ENDPOINT = "http://127.0.0.1:9000"
BLOCK_TIMEOUT = 180
# Variables of the shell running the test that would change what the docs' commands do: a reader's
# fresh shell has none of them (the test sets SHIPYARD_HOME and the S3 ones itself).
CLEARED = ("SHIPYARD_", "AWS_", "RAY_")


@dataclass(frozen=True)
class Block:
    line: int      # of the opening fence, 1-based
    info: str
    code: str

    @property
    def language(self) -> str:
        return self.info.split(maxsplit=1)[0] if self.info else ""

    @property
    def modifier(self) -> str:
        return self.info[len(self.language):].strip()

    def where(self, doc: Path) -> str:
        return f"{doc.relative_to(ROOT)}:{self.line}"


def blocks(doc: Path) -> list[Block]:
    """The fenced code blocks of a markdown file, their indentation (a list item's) removed."""
    found, lines, i = [], doc.read_text().splitlines(), 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        end = i + 1
        while end < len(lines) and not re.match(rf"^ *{fence[0]}{{{len(fence)},}}\s*$", lines[end]):
            end += 1
        body = [line[min(indent, len(line) - len(line.lstrip(" "))):] for line in lines[i + 1:end]]
        found.append(Block(i + 1, opening["info"].strip(), "\n".join(body) + "\n"))
        i = end + 1
    return found


def console_commands(code: str) -> str:
    """The commands of a console block: `$ ` lines and their backslash continuations."""
    commands, continued = [], False
    for line in code.splitlines():
        if continued or line.startswith("$ "):
            commands.append(line if continued else line[2:])
            continued = line.endswith("\\")
    return "\n".join(commands) + "\n"


def check_form(doc: Path, block: Block) -> None:
    """The convention above: a language, and nothing after it but `skip: REASON`, `excerpt` or
    `file=PATH`."""
    where, modifier = block.where(doc), block.modifier
    assert block.language, f"{where}: a fence needs a language (text for output; see tests/project/test_docs.py)"
    if not modifier:
        return
    if modifier.startswith("skip"):
        assert re.match(r"skip: \S", modifier), f"{where}: write `skip: REASON`, saying why it is not run"
    elif modifier == "excerpt":
        assert block.language == "python", f"{where}: only python blocks are excerpts"
        try:
            compile(textwrap.dedent(block.code), where, "exec")
        except SyntaxError as exc:
            pytest.fail(f"{where}: the excerpt is not valid Python: {exc}")
    elif modifier.startswith("file="):
        path = ROOT / modifier.removeprefix("file=")
        assert path.is_file(), f"{where}: {path} does not exist"
        assert block.code == path.read_text(), f"{where}: the block differs from {path.relative_to(ROOT)}"
    else:
        pytest.fail(f"{where}: unknown info string {block.info!r} (see tests/project/test_docs.py)")


def s3_variables(endpoint: str) -> dict[str, str]:
    """The `export`s of docs/storage.md's local-S3 block, its endpoint replaced by the test's server."""
    setup = next(b for b in blocks(ROOT / "docs" / "storage.md") if "moto_server" in b.code)
    variables = {}
    for line in setup.code.splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["export"]:
            variables.update(word.split("=", 1) for word in words[1:])
    assert variables.get("AWS_ENDPOINT_URL_S3") == DOC_ENDPOINT, "the S3 doc's endpoint moved: update DOC_ENDPOINT"
    return {k: v.replace(DOC_ENDPOINT, endpoint) for k, v in variables.items()}


def _not_copied(directory: str, names: list[str]) -> set[str]:
    """Caches everywhere; at the top, the venv (linked instead), git's data, build output, and the
    package itself: the venv has it installed (editable) from this checkout, and a second copy in the
    working directory would shadow it for `python -m` and `python -c` (and for processes started from
    there, such as a warm pool's), importing code from a path that instances' sandboxes do not show."""
    top = {".venv", ".git", "shipyard", ".pytest_cache", ".shipyard", "build", "dist"}
    top = top if Path(directory) == ROOT else set()
    return {n for n in names if n in top or n == "__pycache__" or n.endswith(".egg-info")}


@pytest.fixture
def workspace(tmp_path):
    """A copy of the repository, as a fresh clone after `make setup` holds it."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT, copy, symlinks=True, ignore=_not_copied)
    (copy / ".venv").symlink_to(ROOT / ".venv")
    return copy


def run_block(doc: Path, block: Block, cwd: Path, env: dict, scratch: Path, started: list) -> None:
    script = scratch / f"{doc.stem}-{block.line}"
    if block.language == "python":
        script = script.with_suffix(".py")
        command = ["python", str(script)]
        script.write_text(block.code)
    else:
        script.write_text(console_commands(block.code) if block.language == "console" else block.code)
        command = ["bash", "-euo", "pipefail", str(script)]
    since = time.time()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)  # its own group: leftovers are found
    started.append((process.pid, since))
    try:
        output, _ = process.communicate(timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"{block.where(doc)}: still running after {BLOCK_TIMEOUT} s\n--- block ---\n{block.code}"
                    f"--- output ---\n{output[-8000:]}")
    if process.returncode != 0:
        pytest.fail(f"{block.where(doc)}: exit code {process.returncode}\n--- block ---\n{block.code}"
                    f"--- output ---\n{output[-8000:]}")


def kill_leftovers(started: list) -> None:
    """Kill what blocks left running in the background (a server started with `&`): the processes of
    each block's process group that started after the block did."""
    groups = dict(started)
    for process in psutil.process_iter(["pid", "create_time"]):
        try:
            since = groups.get(os.getpgid(process.pid))
            # A second of slack: create_time counts from boot in clock ticks, not to the microsecond.
            if since is not None and process.info["create_time"] >= since - 1:
                process.kill()
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass


@pytest.mark.parametrize("doc", DOCUMENTS, ids=[str(d.relative_to(ROOT)) for d in DOCUMENTS])
def test_the_commands_of_a_document_run_as_written(doc, workspace, tmp_path, s3_server):
    found = blocks(doc)
    for block in found:
        check_form(doc, block)
    runnable = [b for b in found if b.language in RUN and not b.modifier]
    if not runnable:
        return
    home, scratch = tmp_path / "home", tmp_path / "blocks"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(CLEARED) and k != "VIRTUAL_ENV"}
    env.update(PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(ROOT / ".venv"),
               SHIPYARD_HOME=str(home), **s3_variables(s3_server))
    started: list[tuple[int, float]] = []
    try:
        for block in runnable:
            run_block(doc, block, workspace, env, scratch, started)
    finally:
        kill_leftovers(started)
        clean_home(home)
        urllib.request.urlopen(urllib.request.Request(f"{s3_server}/moto-api/reset", method="POST")).close()
