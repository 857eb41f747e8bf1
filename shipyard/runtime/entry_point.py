"""How the toolkit turns an entry point into a command: `.sh` is a command, a code directory with
setup.py is a package, `.py` is a program, anything else a command. Arguments are passed as an argv
list, never joined into a shell string, so hyperparameter values reach the script literally."""

from __future__ import annotations

import enum
import sys
from pathlib import Path


class EntryPointType(enum.Enum):
    PYTHON_PACKAGE = "PYTHON_PACKAGE"
    PYTHON_PROGRAM = "PYTHON_PROGRAM"
    COMMAND = "COMMAND"


def entry_point_type(code_dir: Path, name: str) -> EntryPointType:
    if name.endswith(".sh"):
        return EntryPointType.COMMAND
    if (code_dir / "setup.py").exists():
        return EntryPointType.PYTHON_PACKAGE
    if name.endswith(".py"):
        return EntryPointType.PYTHON_PROGRAM
    return EntryPointType.COMMAND


def module_name(entry: str) -> str:
    return entry[:-3] if entry.endswith(".py") else entry


def command(code_dir: Path, entry: str, args: list[str], python: str = sys.executable) -> list[str]:
    kind = entry_point_type(code_dir, entry)
    if kind is EntryPointType.PYTHON_PACKAGE:
        return [python, "-m", module_name(entry), *args]
    if kind is EntryPointType.PYTHON_PROGRAM:
        return [python, entry, *args]
    # A shell script runs under /bin/sh with the arguments as $1..$n: no word splitting of values.
    if entry.endswith(".sh"):
        return ["/bin/sh", entry, *args]
    return [f"./{entry}", *args]
