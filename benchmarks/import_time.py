"""What a training process loads from shipyard, now vs a baseline revision, side by side in one run.

    .venv/bin/python benchmarks/import_time.py [--baseline c6152c5] [--repeat 7]

The baseline is checked out with `git worktree` into a temporary directory (default: the last commit
before the in-process parts were separated: lazy re-exports, then the split along the layers). Each repetition starts a fresh
`python -X importtime -c "import <the in-process modules>"` for each tree, alternating, and reads the
cumulative time of each module (imported in the order below, so each counts only what the ones
before it did not load); the median is reported, with the ratio, and which heavy packages each
tree's import pulled in. In-process modules: the heartbeat, the gloo exit guard, the debugger hook and
the profiler's step recorder (the baseline's paths where they have moved)."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# now -> where the baseline had it
MODULES = {
    "shipyard.runtime.heartbeat": "shipyard.runtime.heartbeat",
    "shipyard.runtime.process_group_exit": "shipyard.runtime.process_group_exit",
    "shipyard.runtime.debugger.hook": "shipyard.debugger.hook",
    "shipyard.runtime.profiler.steps": "shipyard.profiler.steps",
}
HEAVY = ("pydantic", "shipyard.sdk", "shipyard.rules", "shipyard.spec", "shipyard.control", "shipyard.store")


def measure(tree: Path, modules: list[str]) -> tuple[dict[str, float], list[str]]:
    """Cumulative import seconds of each module (imported in this order, in one fresh interpreter), and
    the heavy packages loaded."""
    code = (f"import sys\nfor m in {modules!r}: __import__(m)\n"
            f"print(sorted({{m.split('.')[0] if m.startswith('pydantic') else '.'.join(m.split('.')[:2]) "
            f"for m in sys.modules if m.startswith({HEAVY!r})}}))")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=tempfile.gettempdir(),
                          env=env, capture_output=True, text=True, check=True)
    times = {}
    for line in done.stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] in modules:
            times[parts[2]] = int(parts[1]) / 1e6
    return times, eval(done.stdout.strip().splitlines()[-1])  # noqa: S307 (our own print of a list)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="c6152c5")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shipyard-baseline-") as tmp:
        base = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.baseline],
                       check=True, capture_output=True)
        try:
            trees = {"now": (ROOT, list(MODULES)), args.baseline: (base, list(MODULES.values()))}
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
            heavy = {}
            for _ in range(args.repeat + 1):  # the first round warms the page cache, unmeasured
                for name, (tree, modules) in trees.items():
                    times, heavy[name] = measure(tree, modules)
                    runs[name].append(times)
            print(f"python -X importtime, median of {args.repeat} fresh interpreters, cumulative seconds")
            print(f"{'module (now)':40} {args.baseline:>10} {'now':>10} {'ratio':>7}")
            for now, old in MODULES.items():
                b = statistics.median(r.get(old, 0.0) for r in runs[args.baseline][1:])
                n = statistics.median(r.get(now, 0.0) for r in runs["now"][1:])
                print(f"{now:40} {b:10.4f} {n:10.4f} {b / n if n else float('inf'):6.1f}x")
            total = {name: statistics.median(sum(r.values()) for r in runs[name][1:]) for name in trees}
            print(f"{'all four, in this order':40} {total[args.baseline]:10.4f} {total['now']:10.4f} "
                  f"{total[args.baseline] / total['now']:6.1f}x")
            for name in trees:
                print(f"heavy packages loaded ({name}): {', '.join(heavy[name]) or 'none'}")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
