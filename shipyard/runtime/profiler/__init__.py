"""The profiler inside an instance: the framework recorders in every training process (steps.py, with
phases.py, dataloader.py, detailed.py, python_profiler.py, installed by the injected sitecustomize) and
the agent's part (agent.py: the config file, the system monitor of monitor.py, the upload). The training
process side imports nothing of the SDK, the rules or pydantic (tests/project/test_imports.py)."""
