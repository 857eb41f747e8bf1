"""The Ray backend: the same job on a Ray cluster, one instance per node. backend.py is the backend (plans,
placement groups, instances as the controller sees them), actor.py the actor that runs the instance's
agent on its node, placement.py the resources an instance asks for, streams.py what flows back from a
node (log, events, heartbeats, artifacts), reaper.py what stops an unsandboxed script whose actor died.
See docs/ray.md."""
