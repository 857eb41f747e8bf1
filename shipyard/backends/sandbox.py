"""Instance sandboxes with bubblewrap: a private /opt/ml, the host name algo-N, an /etc/hosts that
resolves every algo-*, and a PID namespace so that killing the sandbox kills everything in it.

Networking is shared with this machine: each instance gets its own loopback address (127.0.1.N), and
ports a job needs are allocated per job, because a private network namespace would also cut the
instance off from loopback services it needs (object storage, package indexes)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

SANDBOX_OPT = Path("/opt")


def host_address(index: int) -> str:
    """The loopback address of the index-th (1-based) instance: 127.0.1.1, 127.0.1.2, ..."""
    return f"127.0.{1 + (index - 1) // 254}.{(index - 1) % 254 + 1}"


def hosts_file(addresses: dict[str, str]) -> str:
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{address}\t{host}" for host, address in addresses.items()]
    return "\n".join(lines) + "\n"


def bwrap_problem() -> str | None:
    """None when bubblewrap can make our sandboxes here, else why not (shown to the user).
    SHIPYARD_SANDBOX=off runs instances as plain processes on purpose."""
    return _bwrap_problem(os.environ.get("SHIPYARD_SANDBOX", ""))


@functools.cache
def _bwrap_problem(setting: str) -> str | None:
    if setting.lower() in ("0", "off", "none", "false"):
        return "disabled by SHIPYARD_SANDBOX"
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return "bubblewrap (bwrap) is not installed; run `make setup` or `apt-get install bubblewrap`"
    probe = [bwrap, "--dev-bind", "/", "/", "--unshare-uts", "--hostname", "algo-probe",
             "--unshare-pid", "--proc", "/proc", "--", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap cannot run here: {exc}"
    if done.returncode != 0:
        return f"bubblewrap cannot create namespaces here: {done.stderr.strip() or done.returncode}"
    return None


def wrap(argv: list[str], *, ml_dir: Path, hosts: Path, hostname: str) -> list[str]:
    """The bwrap command line that runs argv in an instance sandbox."""
    command = [shutil.which("bwrap") or "bwrap", "--dev-bind", "/", "/"]
    # A tmpfs over /opt gives /opt/ml a place without touching this machine's /opt; everything else in
    # /opt is bound back so tools installed there keep working.
    command += ["--tmpfs", str(SANDBOX_OPT)]
    if SANDBOX_OPT.is_dir():
        for entry in sorted(SANDBOX_OPT.iterdir()):
            if entry.name == "ml":
                continue
            if entry.is_symlink():
                command += ["--symlink", os.readlink(entry), str(entry)]
            else:
                command += ["--dev-bind", str(entry), str(entry)]
    command += [
        "--bind", str(ml_dir), str(SANDBOX_OPT / "ml"),
        "--ro-bind", str(hosts), "/etc/hosts",
        "--unshare-uts", "--hostname", hostname,
        "--unshare-pid", "--proc", "/proc",
        "--die-with-parent",
        "--",
    ]
    return command + argv
