"""Put on the entry point's PYTHONPATH by the agent, so that every Python process of a job, without
changes to the script:

- writes whole lines: stdout and stderr are line-buffered, so each line reaches the host log (an
  O_APPEND file shared by every process of the instance) in one write and lines of concurrent ranks
  never interleave mid-line (PYTHONUNBUFFERED would split a print into several writes);
- reports a heartbeat (shipyard.runtime.heartbeat) when the job watches for hangs;
- marks the first read of a restored checkpoint (shipyard.runtime.resume_check);
- saves tensors when the job asks for debugging (shipyard.runtime.debugger.hook);
- records step times when the job asks for framework profiling (shipyard.runtime.profiler.steps);
- keeps torch's store servers on the instance's own address, not every interface (shipyard.runtime.bind);
- ends a process that used gloo without the interpreter's teardown aborting it: the group destroyed
  at exit, a clean finish left with os._exit(0) (shipyard.runtime.process_group_exit);
- serves SageMaker's own libraries (smdistributed, smdebug, sagemaker_training, ...) where the user has
  not installed them (shipyard.runtime.served_libraries).

Any other sitecustomize on the path still runs."""

import importlib
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
# (environment variable the agent sets, module whose install() to call, what it is): each only when the
# job asks for it (SHIPYARD_INSTANCE_DIR: every job), and an aid that fails never stops the script.
for _variable, _module, _what in (
    ("SHIPYARD_INSTANCE_DIR", "shipyard.runtime.process_group_exit", "process group cleanup at exit"),
    ("SHIPYARD_CHECKPOINT_WATCH", "shipyard.runtime.resume_check", "checkpoint read check"),
    ("SHIPYARD_HEARTBEAT_DIR", "shipyard.runtime.heartbeat", "heartbeat"),
    ("SMDEBUG_CONFIG_FILE_PATH", "shipyard.runtime.debugger.hook", "debugger hook"),
    ("SHIPYARD_PROFILER_DIR", "shipyard.runtime.profiler.steps", "step profiling"),
    ("SHIPYARD_BIND_ADDRESS", "shipyard.runtime.bind", "store address binding"),
):
    if os.environ.get(_variable):
        try:
            importlib.import_module(_module).install()
        except Exception as exc:
            print(f"shipyard: {_what} not installed: {exc}", file=sys.stderr)

importlib.import_module("shipyard.runtime.served_libraries").install()  # a finder asked last: nothing to fail

# Chain to the sitecustomize this one shadows, if there is one, without disturbing this module's import.
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here]
)
if _spec is not None and _spec.loader is not None:
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
