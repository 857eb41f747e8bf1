"""`python -m shipyard.algorithms NAME`: run the built-in algorithm NAME on this instance (the launcher's
command for a job of an algorithm's image, runtime/launchers/algorithm.py)."""

from __future__ import annotations

import sys

from shipyard.spec.images import ALGORITHMS

if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m shipyard.algorithms NAME", file=sys.stderr)
        sys.exit(2)
    sys.exit(ALGORITHMS.load(sys.argv[1]).main())
