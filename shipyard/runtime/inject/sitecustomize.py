"""Put on the entry point's PYTHONPATH by the agent, so that every Python process of a job, without
changes to the script:

- writes whole lines: stdout and stderr are line-buffered, so each line reaches the host log (an
  O_APPEND file shared by every process of the instance) in one write and lines of concurrent ranks
  never interleave mid-line (PYTHONUNBUFFERED would split a print into several writes);
- reports a heartbeat (shipyard.runtime.heartbeat) when the job watches for hangs;
- marks the first read of a restored checkpoint (shipyard.runtime.resume_check);
- records step times when the job asks for framework profiling (shipyard.profiler.steps).

Any other sitecustomize on the path still runs."""

import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("SHIPYARD_LINE_BUFFERED"):
    for _stream in (sys.stdout, sys.stderr):
        try:
            _stream.reconfigure(line_buffering=True, write_through=False)
        except (AttributeError, ValueError):  # replaced or closed streams
            pass
if os.environ.get("SHIPYARD_CHECKPOINT_WATCH"):
    try:
        from shipyard.runtime import resume_check

        resume_check.install()
    except Exception as exc:
        print(f"shipyard: checkpoint read check not installed: {exc}", file=sys.stderr)
if os.environ.get("SHIPYARD_HEARTBEAT_DIR"):
    try:
        from shipyard.runtime import heartbeat

        heartbeat.install()
    except Exception as exc:  # a monitoring aid must never stop the script from running
        print(f"shipyard: heartbeat not installed: {exc}", file=sys.stderr)

if os.environ.get("SMDEBUG_CONFIG_FILE_PATH"):
    try:
        from shipyard.debugger import hook

        hook.install()
    except Exception as exc:
        print(f"shipyard: debugger hook not installed: {exc}", file=sys.stderr)

if os.environ.get("SHIPYARD_PROFILER_DIR"):
    try:
        from shipyard.profiler import steps

        steps.install()
    except Exception as exc:
        print(f"shipyard: step profiling not installed: {exc}", file=sys.stderr)

# Chain to the sitecustomize this one shadows, if there is one, without disturbing this module's import.
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here]
)
if _spec is not None and _spec.loader is not None:
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
