"""Prints --lines numbered lines, as fast as it can, in bursts (a flush every 100), then its last line:
what the test reads back from each host's log, complete and in order."""

import os
import sys

host = os.environ["SM_CURRENT_HOST"]
lines = int(sys.argv[sys.argv.index("--lines") + 1])
for i in range(lines):
    print(f"{host} line {i}", flush=i % 100 == 99)
print(f"{host} wrote {lines} lines", flush=True)
