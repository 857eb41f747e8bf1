"""Imports point down the layers written in docs/architecture.md (its Layers table, the one place the
direction is written): every import of a shipyard module, at module level or inside a function, goes to
its own layer or one below, and every module belongs to a layer."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "shipyard"


def layers(doc: str) -> list[tuple[str, list[str]]]:
    """[(layer, module prefixes)] from the top layer down, from the table under '## Layers'."""
    section = doc.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Layer")]
    out = []
    for row in rows:
        name, paths = [cell.strip() for cell in row.strip("|").split("|")][:2]
        prefixes = []
        for path in re.findall(r"`([^`]+)`", paths):
            path = path.removesuffix("/").removesuffix(".py")
            prefixes.append("shipyard" if path == "__init__" else f"shipyard.{path.replace('/', '.')}")
        out.append((name, prefixes))
    return out


def layer_of(module: str, table: list[tuple[str, list[str]]]) -> int | None:
    """Index from the bottom (0) of the layer holding `module`; the package itself is only `shipyard`."""
    for index, (_, prefixes) in enumerate(reversed(table)):
        for prefix in prefixes:
            if module == prefix or (prefix != "shipyard" and module.startswith(prefix + ".")):
                return index
    return None


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path) -> set[str]:
    """The shipyard modules `path` imports (`from pkg import submodule` counts as the submodule)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            for alias in node.names:
                sub = root.parent / f"{base}.{alias.name}".replace(".", "/")
                found.add(f"{base}.{alias.name}" if sub.with_suffix(".py").exists() or (sub / "__init__.py").exists()
                          else base)
    return {m for m in found if m == "shipyard" or m.startswith("shipyard.")}


def violations(root: Path, table) -> list[str]:
    problems = []
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root)
        own = layer_of(name, table)
        if own is None:
            problems.append(f"{name} is in no layer: add it to the Layers table of docs/architecture.md")
            continue
        for target in sorted(imports(path, root)):
            theirs = layer_of(target, table)
            if theirs is not None and theirs > own:
                problems.append(f"{name} ({table[-1 - own][0]}) imports {target} ({table[-1 - theirs][0]}), "
                                "a layer above it")
    return problems


TABLE = layers((ROOT / "docs" / "architecture.md").read_text())


def test_the_table_is_read():
    names = [name for name, _ in TABLE]
    assert names == ["sdk", "control", "backends", "runtime", "spec", "storage", "base"]
    assert layer_of("shipyard.control.controller", TABLE) > layer_of("shipyard.store.db", TABLE)
    assert layer_of("shipyard.runtime.profiler.steps", TABLE) < layer_of("shipyard.profiler", TABLE)
    assert {"shipyard.backends", "shipyard.control.planning"} <= imports(PACKAGE / "control" / "controller.py", PACKAGE)


def test_no_import_runs_up_the_layers():
    assert violations(PACKAGE, TABLE) == []


@pytest.mark.parametrize("source, problem", [
    ("from shipyard.sdk.estimator import Estimator\n", "shipyard.spec.job (spec) imports shipyard.sdk.estimator (sdk)"),
    ("def f():\n    from shipyard import rules\n", "shipyard.spec.job (spec) imports shipyard.rules (control)"),
    ("from ..control import controller\n", "shipyard.spec.job (spec) imports shipyard.control.controller (control)"),
])
def test_an_import_up_the_layers_is_found(tmp_path, source, problem):
    root = tmp_path / "shipyard"
    for module in ("spec/job.py", "sdk/estimator.py", "rules/__init__.py", "control/controller.py"):
        (root / module).parent.mkdir(parents=True, exist_ok=True)
        (root / module).write_text("")
    (root / "spec" / "job.py").write_text(source)
    assert [p.split(", a layer")[0] for p in violations(root, TABLE)] == [problem]


def test_a_module_in_no_layer_is_found(tmp_path):
    root = tmp_path / "shipyard"
    (root / "oracle").mkdir(parents=True)
    (root / "oracle" / "cost.py").write_text("")
    assert violations(root, TABLE) == ["shipyard.oracle.cost is in no layer: add it to the Layers table of "
                                       "docs/architecture.md"]
