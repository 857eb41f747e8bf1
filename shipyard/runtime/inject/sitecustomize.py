"""Put on the entry point's PYTHONPATH by the agent so every Python process of a job reports a heartbeat
(shipyard.runtime.heartbeat) without changes to the script. Any other sitecustomize on the path
still runs."""

import importlib
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("SHIPYARD_HEARTBEAT_DIR"):
    try:
        from shipyard.runtime import heartbeat

        heartbeat.install()
    except Exception as exc:  # a monitoring aid must never stop the script from running
        print(f"shipyard: heartbeat not installed: {exc}", file=sys.stderr)

# Chain to the sitecustomize this one shadows, if there is one.
_path = sys.path[:]
try:
    sys.path[:] = [p for p in _path if os.path.abspath(p or ".") != _here]
    del sys.modules["sitecustomize"]
    importlib.import_module("sitecustomize")
except ImportError:
    pass
finally:
    sys.path[:] = _path
