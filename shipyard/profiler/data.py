"""`shipyard.profiler.data.ProfilerReader(uri)` as docs/profiler.md shows it: the reader lives with the
rules that use it (shipyard/rules/profiler/data.py); this name is that module."""

from shipyard.lazy import alias

alias(__name__, "shipyard.rules.profiler.data")
